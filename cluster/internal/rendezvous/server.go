package rendezvous

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/vyre-go/vyrecuda/core/driver"
)

// ConnTimeout bounds each connection, on both sides: a rank that opens one
// and stalls is dropped (and may come again) after it.
const ConnTimeout = 10 * time.Second

// Server is rank 0's end: it listens, then serves one id to every other
// rank of the job.
type Server struct {
	ln    net.Listener
	world int
}

// Listen listens on addr ("host:port"; an empty host listens on every
// interface) for the other world-1 ranks of a job of world ranks.
func Listen(addr string, world int) (*Server, error) {
	if world < 2 {
		return nil, fmt.Errorf("rendezvous: a job of %d ranks has no other rank to serve", world)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Server{ln: ln, world: world}, nil
}

// Addr returns the address the Server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops listening. Serve closes the Server itself; Close is for a
// Server that is never served.
func (s *Server) Close() error { return s.ln.Close() }

// MissingError is Serve's failure when ctx is done before every rank
// confirmed that it holds the id.
type MissingError struct {
	Missing []int // the ranks that did not confirm, ascending
	Err     error // ctx.Err()
}

// Error names the missing ranks and why the wait ended.
func (e *MissingError) Error() string {
	return fmt.Sprintf("rendezvous: ranks %v never fetched the id: %v", e.Missing, e.Err)
}

// Unwrap returns ctx.Err(), so errors.Is(err, context.DeadlineExceeded) holds.
func (e *MissingError) Unwrap() error { return e.Err }

// Serve hands id to every rank from 1 to world-1 that asks, and returns
// once each has confirmed receipt, or with a *MissingError when ctx is done
// first. A rank may ask again (after a broken connection); a caller that
// claims another world size, a rank out of range or another protocol
// version is refused with the reason. Serve closes the Server before it
// returns, and waits for its connections to end.
func (s *Server) Serve(ctx context.Context, id driver.CommID) error {
	// Deferred calls run last first: close the listener, cancel (which
	// closes the open connections), then wait for the goroutines.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	context.AfterFunc(ctx, func() { s.ln.Close() })
	defer s.ln.Close()
	acks := make(chan int)
	failed := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := s.ln.Accept()
			if err != nil {
				if ctx.Err() == nil {
					failed <- err
				}
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if rank, ok := s.handle(ctx, c, id); ok {
					select {
					case acks <- rank:
					case <-ctx.Done():
					}
				}
			}()
		}
	}()
	got := make(map[int]bool, s.world-1)
	for len(got) < s.world-1 {
		select {
		case r := <-acks:
			got[r] = true
		case err := <-failed:
			return fmt.Errorf("rendezvous: accepting connections failed: %w", err)
		case <-ctx.Done():
			return &MissingError{Missing: s.missing(got), Err: context.Cause(ctx)}
		}
	}
	return nil
}

func (s *Server) missing(got map[int]bool) []int {
	var out []int
	for r := 1; r < s.world; r++ {
		if !got[r] {
			out = append(out, r)
		}
	}
	sort.Ints(out)
	return out
}

// handle serves one connection and reports the rank that confirmed
// receipt of the id, if any. The connection is closed when ctx is done.
func (s *Server) handle(ctx context.Context, c net.Conn, id driver.CommID) (rank int, ok bool) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if err := c.SetDeadline(deadline(ctx)); err != nil {
		return 0, false
	}
	version, rank, world, err := readHello(c)
	if err != nil {
		return 0, false // not a rank of ours, or it went away: nothing to answer
	}
	why := ""
	switch {
	case version != Version:
		why = fmt.Sprintf("rank 0 speaks protocol version %d, the caller %d", Version, version)
	case world != s.world:
		why = fmt.Sprintf("the caller's job has %d ranks, rank 0's has %d", world, s.world)
	case rank < 1 || rank >= s.world:
		why = fmt.Sprintf("rank %d is not one of 1 to %d", rank, s.world-1)
	}
	if why != "" {
		_, _ = c.Write(encodeReply(kindRefused, []byte(why)))
		return 0, false
	}
	if _, err := c.Write(encodeReply(kindID, id[:])); err != nil {
		return 0, false
	}
	if err := readAck(c, rank); err != nil {
		return 0, false
	}
	return rank, true
}

// deadline is ConnTimeout from now, or ctx's deadline when sooner.
func deadline(ctx context.Context) time.Time {
	d := time.Now().Add(ConnTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		return cd
	}
	return d
}
