package diskcache

import (
	"bytes"
	"testing"
)

// entryBytes lays an entry out the way Put writes it.
func entryBytes(data []byte) []byte {
	hdr := header(data)
	return append(hdr[:], data...)
}

// FuzzDecode: any file content decodes without panicking, an entry written
// by Put decodes to its data, and any change to one byte of it is detected.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("cubin"), 0, byte(1))
	f.Add([]byte{}, 3, byte(0x80))
	f.Add([]byte(magic), 60, byte(7))
	f.Fuzz(func(t *testing.T, data []byte, at int, flip byte) {
		_, _ = decode(data) // arbitrary bytes: no panic
		raw := entryBytes(data)
		got, err := decode(raw)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("decode(entry(%q)) = %q, %v", data, got, err)
		}
		if flip == 0 || len(raw) == 0 {
			return
		}
		i := (at%len(raw) + len(raw)) % len(raw)
		raw[i] ^= flip
		if got, err := decode(raw); err == nil {
			t.Fatalf("byte %d changed (xor %#x) but decode accepted %q", i, flip, got)
		}
	})
}
