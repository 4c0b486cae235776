package rendezvous

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
)

// testID is a recognizable id.
func testID() driver.CommID {
	var id driver.CommID
	for i := range id {
		id[i] = byte(i*7 + 3)
	}
	return id
}

// listen starts a Server on a free loopback port.
func listen(t *testing.T, world int) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", world)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// withDeadline is a context that ends the test's waits at d.
func withDeadline(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// fetchAll fetches as ranks 1 to world-1 concurrently.
func fetchAll(ctx context.Context, addr string, world int) ([]driver.CommID, []error) {
	ids, errs := make([]driver.CommID, world), make([]error, world)
	var wg sync.WaitGroup
	for r := 1; r < world; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[r], errs[r] = Fetch(ctx, addr, r, world)
		}()
	}
	wg.Wait()
	return ids, errs
}

func TestEveryRankGetsTheID(t *testing.T) {
	ctx := withDeadline(t, 10*time.Second)
	const world = 5
	s := listen(t, world)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, testID()) }()
	ids, errs := fetchAll(ctx, s.Addr().String(), world)
	for r := 1; r < world; r++ {
		require.NoError(t, errs[r], "rank %d", r)
		assert.Equal(t, testID(), ids[r], "rank %d", r)
	}
	require.NoError(t, <-served)
	_, err := net.Dial("tcp", s.Addr().String())
	assert.Error(t, err, "Serve stops listening once every rank has the id")
}

// TestRanksBeforeRankZero: ranks that start before rank 0 listens retry
// until it does.
func TestRanksBeforeRankZero(t *testing.T) {
	ctx := withDeadline(t, 10*time.Second)
	s := listen(t, 3)
	addr := s.Addr().String()
	require.NoError(t, s.Close())
	var ids []driver.CommID
	var errs []error
	done := make(chan struct{})
	go func() { ids, errs = fetchAll(ctx, addr, 3); close(done) }()
	time.Sleep(100 * time.Millisecond) // the ranks' first attempts are refused
	s2, err := Listen(addr, 3)
	require.NoError(t, err)
	require.NoError(t, s2.Serve(ctx, testID()))
	<-done
	for r := 1; r < 3; r++ {
		require.NoError(t, errs[r])
		assert.Equal(t, testID(), ids[r])
	}
}

// TestMissingRanks: a rank that never comes leaves Serve failing at the
// deadline with the ranks that are missing.
func TestMissingRanks(t *testing.T) {
	ctx := withDeadline(t, 10*time.Second)
	s := listen(t, 4)
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- s.Serve(sctx, testID()) }()
	_, err := Fetch(ctx, s.Addr().String(), 2, 4)
	require.NoError(t, err)
	err = <-served
	var me *MissingError
	require.True(t, errors.As(err, &me), "want *MissingError, got %v", err)
	assert.Equal(t, []int{1, 3}, me.Missing)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestUnreachable: without rank 0, Fetch retries until its context is done
// and says what its last attempt met.
func TestUnreachable(t *testing.T) {
	s := listen(t, 2)
	addr := s.Addr().String()
	require.NoError(t, s.Close())
	ctx := withDeadline(t, 300*time.Millisecond)
	_, err := Fetch(ctx, addr, 1, 2)
	var ue *UnreachableError
	require.True(t, errors.As(err, &ue), "want *UnreachableError, got %v", err)
	assert.Greater(t, ue.Attempts, 1, "it retried")
	assert.Error(t, ue.Last)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestRefusals: rank 0 refuses another world size, a rank out of range and
// another protocol version, with the reason; Fetch does not retry a
// refusal.
func TestRefusals(t *testing.T) {
	ctx := withDeadline(t, 10*time.Second)
	s := listen(t, 3)
	go func() { _ = s.Serve(ctx, testID()) }()
	start := time.Now()
	_, err := Fetch(ctx, s.Addr().String(), 1, 4)
	var re *RefusedError
	require.True(t, errors.As(err, &re), "want *RefusedError, got %v", err)
	assert.Contains(t, re.Reason, "the caller's job has 4 ranks, rank 0's has 3")
	assert.Less(t, time.Since(start), 2*time.Second, "a refusal is not retried")

	for name, hello := range map[string][]byte{
		"rank 0":    encodeHello(0, 3),
		"rank 3":    encodeHello(3, 3),
		"version 2": append([]byte(magic), 2, kindHello, 0, 0, 0, 1, 0, 0, 0, 3),
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", s.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
			_, err = c.Write(hello)
			require.NoError(t, err)
			_, why, err := readReply(c)
			require.NoError(t, err)
			assert.NotEmpty(t, why)
		})
	}
}

// TestNotRankZero: something else at the address fails Fetch at once.
func TestNotRankZero(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c.Close()
		}
	}()
	_, err = Fetch(withDeadline(t, 10*time.Second), ln.Addr().String(), 1, 2)
	var pe *ProtocolError
	require.True(t, errors.As(err, &pe), "want *ProtocolError, got %v", err)
	assert.Contains(t, pe.Reason, "bad magic")
}

// TestStallingCallerBlocksNoOne: a connection that sends nothing does not
// hold up the ranks, and Serve returns without waiting for it.
func TestStallingCallerBlocksNoOne(t *testing.T) {
	ctx := withDeadline(t, 10*time.Second)
	s := listen(t, 3)
	staller, err := net.Dial("tcp", s.Addr().String())
	require.NoError(t, err)
	defer staller.Close()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, testID()) }()
	_, errs := fetchAll(ctx, s.Addr().String(), 3)
	require.NoError(t, errs[1])
	require.NoError(t, errs[2])
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(ConnTimeout / 2):
		t.Fatal("Serve waited for the stalled connection")
	}
	require.NoError(t, staller.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = staller.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the stalled connection is closed")
}

// TestRankAsksTwice: a rank served twice counts once.
func TestRankAsksTwice(t *testing.T) {
	ctx := withDeadline(t, 10*time.Second)
	s := listen(t, 3)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, testID()) }()
	for range 2 {
		id, err := Fetch(ctx, s.Addr().String(), 1, 3)
		require.NoError(t, err)
		assert.Equal(t, testID(), id)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned before rank 2 came: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	_, err := Fetch(ctx, s.Addr().String(), 2, 3)
	require.NoError(t, err)
	require.NoError(t, <-served)
}

func TestListenRefusesAJobOfOne(t *testing.T) {
	s, err := Listen("127.0.0.1:0", 1)
	assert.Nil(t, s)
	assert.Error(t, err)
	_, err = Fetch(context.Background(), "127.0.0.1:1", 0, 2)
	assert.Error(t, err, "rank 0 does not fetch")
}

// TestReplyChecks: a reply with a wrong magic, version, kind or length is
// a protocol error; a good one reads back.
func TestReplyChecks(t *testing.T) {
	id := testID()
	got, why, err := readReply(bytes.NewReader(encodeReply(kindID, id[:])))
	require.NoError(t, err)
	assert.Empty(t, why)
	assert.Equal(t, id, got)
	_, why, err = readReply(bytes.NewReader(encodeReply(kindRefused, []byte("no"))))
	require.NoError(t, err)
	assert.Equal(t, "no", why)
	bad := map[string][]byte{
		"magic":        append([]byte("XXXX"), encodeReply(kindID, id[:])[4:]...),
		"version":      append(append([]byte(magic), 9), encodeReply(kindID, id[:])[5:]...),
		"kind":         encodeReply(kindAck, id[:]),
		"short id":     encodeReply(kindID, id[:100]),
		"empty no":     encodeReply(kindRefused, nil),
		"long refusal": encodeReply(kindRefused, make([]byte, maxPayload+1)),
	}
	for name, b := range bad {
		_, _, err := readReply(bytes.NewReader(b))
		var pe *ProtocolError
		assert.True(t, errors.As(err, &pe), "%s: want *ProtocolError, got %v", name, err)
	}
	_, _, err = readReply(bytes.NewReader(encodeReply(kindID, id[:])[:50]))
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "a cut reply is a broken connection, retried")
	assert.Error(t, readAck(bytes.NewReader(encodeAck(2)), 1), "an ack for another rank")
	assert.NoError(t, readAck(bytes.NewReader(encodeAck(1)), 1))
}
