package diskcache

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPutGetAcrossInstances(t *testing.T) {
	dir := t.TempDir()
	a, err := Open(dir, 1<<20)
	require.NoError(t, err)
	k := KeyOf([]byte("source"), []byte("sm_90"))
	_, ok := a.Get(k)
	assert.False(t, ok)
	require.NoError(t, a.Put(k, []byte("image bytes")))
	b, err := Open(dir, 1<<20) // a second process opens the same directory
	require.NoError(t, err)
	got, ok := b.Get(k)
	require.True(t, ok)
	assert.Equal(t, "image bytes", string(got))
	require.NoError(t, b.Put(k, []byte("newer")))
	got, _ = a.Get(k)
	assert.Equal(t, "newer", string(got))
	tmps, _ := filepath.Glob(filepath.Join(dir, ".tmp-*"))
	assert.Empty(t, tmps, "no temporary file is left behind")
}

func TestKeyOfSeparatesParts(t *testing.T) {
	assert.NotEqual(t, KeyOf([]byte("ab"), []byte("c")), KeyOf([]byte("a"), []byte("bc")))
	assert.NotEqual(t, KeyOf([]byte("a")), KeyOf([]byte("a"), nil))
	assert.Equal(t, KeyOf([]byte("x")), KeyOf([]byte("x")))
}

func TestCorruptEntryIsMissAndRewritten(t *testing.T) {
	c, err := Open(t.TempDir(), 1<<20)
	require.NoError(t, err)
	k := KeyOf([]byte("k"))
	require.NoError(t, c.Put(k, []byte("0123456789")))
	p := c.path(k)
	raw, err := os.ReadFile(p)
	require.NoError(t, err)
	for name, bad := range map[string][]byte{
		"flipped byte": append(append([]byte{}, raw[:len(raw)-1]...), raw[len(raw)-1]^1),
		"truncated":    raw[:len(raw)-3],
		"empty":        {},
		"foreign":      []byte("not a cache entry at all, but long enough to have a header........"),
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(p, bad, 0o600))
			_, ok := c.Get(k)
			assert.False(t, ok)
			_, err := os.Stat(p)
			assert.True(t, os.IsNotExist(err), "a corrupt entry is removed")
			require.NoError(t, c.Put(k, []byte("0123456789")))
			got, ok := c.Get(k)
			require.True(t, ok)
			assert.Equal(t, "0123456789", string(got))
		})
	}
}

func TestEvictsLeastRecentlyUsed(t *testing.T) {
	entry := int64(headerLen + 100)
	c, err := Open(t.TempDir(), 3*entry)
	require.NoError(t, err)
	keys := make([]Key, 4)
	base := time.Now().Add(-time.Hour)
	for i := range 3 {
		keys[i] = KeyOf([]byte{byte(i)})
		require.NoError(t, c.Put(keys[i], make([]byte, 100)))
		at := base.Add(time.Duration(i) * time.Minute)
		require.NoError(t, os.Chtimes(c.path(keys[i]), at, at))
	}
	_, ok := c.Get(keys[0]) // refreshes entry 0: entry 1 is now the oldest
	require.True(t, ok)
	keys[3] = KeyOf([]byte{3})
	require.NoError(t, c.Put(keys[3], make([]byte, 100)))
	size, n := c.Usage()
	assert.LessOrEqual(t, size, 3*entry)
	assert.Equal(t, 3, n)
	for i, want := range []bool{true, false, true, true} {
		_, ok := c.Get(keys[i])
		assert.Equal(t, want, ok, "entry %d", i)
	}
}

func TestRefusals(t *testing.T) {
	_, err := Open("", 10)
	assert.ErrorContains(t, err, "Fix:")
	_, err = Open(t.TempDir(), 0)
	assert.ErrorContains(t, err, "Fix:")
	c, err := Open(t.TempDir(), 100)
	require.NoError(t, err)
	assert.ErrorContains(t, c.Put(KeyOf(nil), make([]byte, 200)), "exceeds")
	_, n := c.Usage()
	assert.Zero(t, n)
}

func TestConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Open(dir, 1<<20)
			if !assert.NoError(t, err) {
				return
			}
			for i := range 20 {
				k := KeyOf([]byte(fmt.Sprint(i % 5)))
				assert.NoError(t, c.Put(k, []byte(fmt.Sprintf("value %d", i%5))))
				if got, ok := c.Get(k); ok {
					assert.Equal(t, fmt.Sprintf("value %d", i%5), string(got), "writer %d", w)
				}
			}
		}()
	}
	wg.Wait()
}

func TestPutAtTheCapEdge(t *testing.T) {
	const data = 100
	c, err := Open(t.TempDir(), int64(headerLen+data))
	require.NoError(t, err)
	k := KeyOf([]byte("exact"))
	require.NoError(t, c.Put(k, make([]byte, data)), "an entry whose file is exactly the cap is stored")
	got, ok := c.Get(k)
	require.True(t, ok)
	assert.Len(t, got, data)
	size, n := c.Usage()
	assert.Equal(t, int64(headerLen+data), size)
	assert.Equal(t, 1, n)

	over := KeyOf([]byte("over"))
	assert.ErrorContains(t, c.Put(over, make([]byte, data+1)), "exceeds", "one byte over the cap is refused")
	_, ok = c.Get(over)
	assert.False(t, ok)
	_, ok = c.Get(k)
	assert.True(t, ok, "a refused Put evicts nothing")
}
