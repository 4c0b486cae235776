package main

import (
	"errors"
	"time"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core"
)

// Baselines measured beside the library in the same process: the driver's
// own synchronous copy from (or into) the very Go slice the library moves,
// and the DMA alone, between device memory and page-locked host memory on
// one stream, which bounds what any staging scheme can reach.

// baseline times the driver's two ways of moving n bytes in dir between
// device address dev and host memory.
type baseline struct {
	drv core.Driver
	dir string
	dev uint64
}

// pageable times the driver's synchronous copy of data (an ordinary Go
// slice) over cfg's repeats and returns the median, or 0 when the driver
// cannot do such copies.
func (bl baseline) pageable(data []byte, cfg benchConfig) (time.Duration, error) {
	pc, ok := bl.drv.(core.PageableCopier)
	if !ok || len(data) == 0 {
		return 0, nil
	}
	body := func() error { return pc.MemcpyHtoD(bl.dev, data) }
	if bl.dir == dirReadback {
		body = func() error { return pc.MemcpyDtoH(data, bl.dev) }
	}
	return timeMedian(body, cfg)
}

// pinned times one asynchronous copy of n bytes between page-locked host
// memory and the device, fenced on its own stream, and returns the median.
func (bl baseline) pinned(n int, cfg benchConfig) (d time.Duration, err error) {
	if bl.drv == nil || n <= 0 {
		return 0, nil
	}
	host, err := bl.drv.HostAlloc(uint64(n))
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, bl.drv.HostFree(unsafe.Pointer(unsafe.SliceData(host)))) }()
	s, err := bl.drv.StreamCreate()
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, bl.drv.StreamDestroy(s)) }()
	body := func() error {
		var err error
		if bl.dir == dirReadback {
			err = bl.drv.MemcpyDtoHAsync(host, bl.dev, s)
		} else {
			err = bl.drv.MemcpyHtoDAsync(bl.dev, host, s)
		}
		if err != nil {
			return err
		}
		return bl.drv.StreamSynchronize(s)
	}
	return timeMedian(body, cfg)
}

// timeMedian runs body cfg.Warmup times unmeasured, then cfg.Repeats times
// measured, and returns the median.
func timeMedian(body func() error, cfg benchConfig) (time.Duration, error) {
	for range cfg.Warmup {
		if err := body(); err != nil {
			return 0, err
		}
	}
	times := make([]time.Duration, 0, cfg.Repeats)
	for range cfg.Repeats {
		start := time.Now()
		if err := body(); err != nil {
			return 0, err
		}
		times = append(times, max(time.Since(start), time.Nanosecond))
	}
	return summarize(times).Median, nil
}

// pinnedDMA times the DMA of n bytes in dir into (or out of) a scratch
// device allocation of the Backend, for workloads judged against it.
func pinnedDMA(s *session, dir string, n int, cfg benchConfig) (d time.Duration, err error) {
	if s.drv == nil {
		return 0, nil
	}
	h, err := s.Backend.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, s.Backend.Free(h)) }()
	dev, err := s.Backend.ResidentDevicePtr(h)
	if err != nil {
		return 0, err
	}
	return baseline{drv: s.drv, dir: dir, dev: dev}.pinned(n, cfg)
}
