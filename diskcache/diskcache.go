// Package diskcache is a content-addressed cache of byte blobs in a directory,
// shared safely by concurrent processes: vyrecuda keeps compiled kernels in
// it so a second process compiles nothing.
//
// Each entry is one file named by its key (hex). Writes go to a temporary
// file in the same directory and are renamed into place, so a reader sees a
// whole entry or none. Each file carries a magic header, its length and a
// SHA-256 of its data: an entry that fails those checks (truncated, corrupted,
// foreign) is a miss, is removed, and the next Put rewrites it. The cache
// holds at most a configured number of bytes: after a Put that exceeds it, the
// least recently used entries (by modification time, which Get refreshes) are
// removed. The package knows nothing about what it stores.
package diskcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// magic starts every entry file; it names the format's version.
const magic = "vyrecuda-cache-1\n"

// suffix ends every entry file's name; nothing else in the directory is touched.
const suffix = ".entry"

// headerLen is magic, an 8-byte length and a 32-byte checksum.
const headerLen = len(magic) + 8 + sha256.Size

// Key identifies an entry: a SHA-256 of everything the entry depends on.
type Key [32]byte

// String returns the key in hex, as the entry's file name uses it.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// KeyOf hashes parts with their lengths, so that no two different lists of
// parts give the same key ("ab","c" differs from "a","bc").
func KeyOf(parts ...[]byte) Key {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.LittleEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	var k Key
	h.Sum(k[:0])
	return k
}

// Cache is a directory of entries with a size cap. It is safe for concurrent
// use, and other processes may use the same directory.
type Cache struct {
	dir      string
	maxBytes int64
	mu       sync.Mutex // serialises this process's eviction scans
}

// Open returns the cache in dir, creating the directory (0700) when needed.
// maxBytes caps the total size of entries; it must be positive.
func Open(dir string, maxBytes int64) (*Cache, error) {
	if dir == "" || maxBytes <= 0 {
		return nil, fmt.Errorf("diskcache: Open(%q, %d): want a directory and a positive size cap; Fix: pass both", dir, maxBytes)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("diskcache: %w; Fix: choose a writable cache directory", err)
	}
	return &Cache{dir: dir, maxBytes: maxBytes}, nil
}

// Dir returns the cache's directory.
func (c *Cache) Dir() string { return c.dir }

func (c *Cache) path(k Key) string { return filepath.Join(c.dir, k.String()+suffix) }

// Get returns the entry for k, or ok=false when there is none or it is
// corrupt (a corrupt one is removed). A hit refreshes the entry's
// modification time, so eviction spares it.
func (c *Cache) Get(k Key) (data []byte, ok bool) {
	p := c.path(k)
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, false
	}
	data, err = decode(raw)
	if err != nil {
		_ = os.Remove(p)
		return nil, false
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now)
	return data, true
}

// header returns the bytes an entry file holds before data: the magic,
// data's length and its SHA-256.
func header(data []byte) [headerLen]byte {
	var hdr [headerLen]byte
	copy(hdr[:], magic)
	binary.LittleEndian.PutUint64(hdr[len(magic):], uint64(len(data)))
	sum := sha256.Sum256(data)
	copy(hdr[len(magic)+8:], sum[:])
	return hdr
}

// decode checks an entry file and returns its data.
func decode(raw []byte) ([]byte, error) {
	if len(raw) < headerLen || !bytes.HasPrefix(raw, []byte(magic)) {
		return nil, errors.New("not an entry")
	}
	n := binary.LittleEndian.Uint64(raw[len(magic):])
	body := raw[headerLen:]
	if uint64(len(body)) != n {
		return nil, errors.New("wrong length")
	}
	sum := sha256.Sum256(body)
	if !bytes.Equal(sum[:], raw[len(magic)+8:headerLen]) {
		return nil, errors.New("checksum mismatch")
	}
	return body, nil
}

// Put stores data under k atomically (temporary file, then rename), then
// evicts the least recently used entries while the cache holds more than its
// cap. An entry larger than the cap is not stored.
func (c *Cache) Put(k Key, data []byte) error {
	if int64(len(data)+headerLen) > c.maxBytes {
		return fmt.Errorf("diskcache: entry of %d bytes exceeds the cache's %d-byte cap; Fix: raise the cap", len(data), c.maxBytes)
	}
	f, err := os.CreateTemp(c.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("diskcache: %w; Fix: check the cache directory's permissions and free space", err)
	}
	tmp := f.Name()
	hdr := header(data)
	_, err = f.Write(hdr[:])
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, c.path(k))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("diskcache: writing entry %s: %w; Fix: check the cache directory's permissions and free space", k, err)
	}
	c.evict()
	return nil
}

// entryInfo is one entry file seen by a scan.
type entryInfo struct {
	name string
	size int64
	mod  time.Time
}

// Usage returns the bytes and the number of entries the cache holds.
func (c *Cache) Usage() (bytes int64, entries int) {
	for _, e := range c.scan() {
		bytes += e.size
		entries++
	}
	return bytes, entries
}

func (c *Cache) scan() []entryInfo {
	des, err := os.ReadDir(c.dir)
	if err != nil {
		return nil
	}
	var out []entryInfo
	for _, de := range des {
		if !de.Type().IsRegular() || !strings.HasSuffix(de.Name(), suffix) {
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue // removed by another process meanwhile
		}
		out = append(out, entryInfo{name: de.Name(), size: info.Size(), mod: info.ModTime()})
	}
	return out
}

// evict removes the least recently used entries until the total fits.
func (c *Cache) evict() {
	c.mu.Lock()
	defer c.mu.Unlock()
	es := c.scan()
	var total int64
	for _, e := range es {
		total += e.size
	}
	if total <= c.maxBytes {
		return
	}
	sort.Slice(es, func(i, j int) bool {
		if !es[i].mod.Equal(es[j].mod) {
			return es[i].mod.Before(es[j].mod)
		}
		return es[i].name < es[j].name
	})
	for _, e := range es {
		if total <= c.maxBytes {
			break
		}
		if err := os.Remove(filepath.Join(c.dir, e.name)); err == nil || errors.Is(err, fs.ErrNotExist) {
			total -= e.size
		}
	}
}
