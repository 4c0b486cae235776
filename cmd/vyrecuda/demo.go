package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/vyre-go/vyrecuda/core"
)

// demoDomain separates the demo's static uploads from anyone else's in the
// static cache's keys.
const demoDomain = 0x7679_7265_6465_6d6f // "vyredemo"

// demoFillValue is what the fill step writes into c.
const demoFillValue = 7

// runDemo runs the demo pipeline and prints what it moved. It fails (status
// 1) when the results read back differ from the CPU's.
func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	dev, ordinal := deviceFlags(fs)
	words := fs.Int("words", 1<<16, "uint32 elements per buffer")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: vyrecuda demo [flags]\n\nRuns a resident pipeline end to end (allocate, upload, a multi-step kernel\nsequence with one fence, read back, verify on the CPU) twice, to show the\noptimizer pool and static upload cache at work.\n\n")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	if *words < 1 || *words > 1<<28 {
		fmt.Fprintf(stderr, "vyrecuda demo: -words %d: want 1 to %d\n", *words, 1<<28)
		return exitUsage
	}
	s, err := openSession(string(*dev), *ordinal, 0)
	if err != nil {
		return fail(stderr, "demo", err)
	}
	fmt.Fprintln(stdout, s.Describe())
	err = demo(s.Backend, *words, stdout)
	if cerr := s.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		return fail(stderr, "demo", err)
	}
	return exitOK
}

// demoInputs are the host-side inputs and the CPU's expected result.
type demoInputs struct {
	a, b []byte   // little-endian uint32 words
	want []uint32 // a + b + demoFillValue, wrapping
}

func newDemoInputs(words int) demoInputs {
	in := demoInputs{a: make([]byte, 4*words), b: make([]byte, 4*words), want: make([]uint32, words)}
	for i := 0; i < words; i++ {
		a := uint32(i)*2654435761 + 1
		b := ^uint32(i) << 3
		binary.LittleEndian.PutUint32(in.a[4*i:], a)
		binary.LittleEndian.PutUint32(in.b[4*i:], b)
		in.want[i] = a + b + demoFillValue
	}
	return in
}

// demo runs the pipeline twice over an optimizer dispatcher: the first pass
// allocates from the driver and uploads the static input, the second reuses
// the pooled buffers and the cached static input.
func demo(b *core.Backend, words int, out io.Writer) (err error) {
	d, err := core.NewOptimizerDispatcher(b)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Close()) }()

	in := newDemoInputs(words)
	fmt.Fprintf(out, "pipeline: %d uint32 words (%s) per buffer\n", words, formatBytes(uint64(4*words)))
	fmt.Fprintln(out, "  upload a in 8 chunks; b is a static upload (content-addressed cache)")
	fmt.Fprintln(out, "  one Batch, one fence: clear out; c = fill(7); t = a + b; u = t + c; out = copy(u); read out in 4 ranges")
	b.ResetTelemetry()
	start := time.Now()
	for pass := 1; pass <= 2; pass++ {
		if err := demoPass(b, d, in, pass, out); err != nil {
			return fmt.Errorf("pass %d: %w", pass, err)
		}
	}
	elapsed := time.Since(start)
	t := b.Telemetry()
	st := d.Stats()
	fmt.Fprintln(out, "summary:")
	fmt.Fprintf(out, "  host -> device: %s in %d upload calls\n", formatBytes(t.HostToDeviceBytes), t.UploadOps)
	fmt.Fprintf(out, "  device -> host: %s in %d readback calls\n", formatBytes(t.DeviceToHostBytes), t.ReadbackOps)
	fmt.Fprintf(out, "  copies: %d requested, %d after fusion\n", t.RequestedCopies, t.DeviceCopies)
	fmt.Fprintf(out, "  kernel launches: %d, device memsets: %d (no host bytes)\n", t.KernelLaunches, t.MemsetOps)
	fmt.Fprintf(out, "  sync points: %d host waits on the device in all\n", t.SyncPoints)
	fmt.Fprintf(out, "  optimizer pool: %d buffers (%s) kept for reuse; static cache: %d set (%s)\n",
		st.PooledBuffers, formatBytes(st.PooledBytes), st.StaticEntries, formatBytes(st.StaticCachedBytes))
	fmt.Fprintf(out, "  time: %s wall clock for both passes\n", formatDuration(elapsed))
	fmt.Fprintln(out, "result: OK, every word matches the CPU")
	return nil
}

// demoPass runs the pipeline once and verifies it.
func demoPass(b *core.Backend, d *core.OptimizerDispatcher, in demoInputs, pass int, out io.Writer) (err error) {
	n := len(in.a)
	before := b.Telemetry()
	pooled := d.Stats().PooledBuffers
	resident := b.MemoryStats().Allocated

	static, err := d.AcquireStaticUploads(demoDomain, [][]byte{in.b})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.ReleaseStaticUploads(static)) }()

	// a, c, t, u, out: taken from the pool when a previous pass freed them.
	bufs := make([]core.Buffer, 0, 5)
	defer func() {
		for _, h := range bufs {
			err = errors.Join(err, d.Free(h))
		}
	}()
	for range 5 {
		h, err := d.Alloc(n)
		if err != nil {
			return err
		}
		bufs = append(bufs, h)
	}
	a, c, t, u, res := bufs[0], bufs[1], bufs[2], bufs[3], bufs[4]
	bStatic := static.Bufs[0]
	reused := pooled - d.Stats().PooledBuffers
	grown := b.MemoryStats().Allocated - resident

	batch := core.Batch{
		Clears: []core.Buffer{res},
		Steps: []core.Step{
			{Program: core.ProgramFillU32(), Bufs: []core.Buffer{c}, Config: core.DispatchConfig{Scalars: []uint32{demoFillValue}}},
			{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{a, bStatic, t}},
			{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{t, c, u}},
			{Program: core.ProgramCopyU32(), Bufs: []core.Buffer{u, res}},
		},
	}
	// Eight touching chunks of a, which fusion turns into one copy.
	for _, r := range split(n, 8) {
		batch.Uploads = append(batch.Uploads, core.UploadAt{Buf: a, Offset: r[0], Data: in.a[r[0]:r[1]]})
	}
	// Four touching ranges of out, read back with one copy.
	for _, r := range split(n, 4) {
		batch.Reads = append(batch.Reads, res.Slice(r[0], r[1]-r[0]))
	}
	parts, err := b.Run(batch, nil)
	if err != nil {
		return err
	}
	got := make([]byte, 0, n)
	for _, p := range parts {
		got = append(got, p...)
	}
	if err := verifyWords("out", got, in.want); err != nil {
		return err
	}

	after := b.Telemetry()
	staticNote := fmt.Sprintf("static b uploaded (%s)", formatBytes(uint64(n)))
	if static.CacheHit {
		staticNote = "static b from the cache (nothing uploaded)"
	}
	fmt.Fprintf(out, "pass %d: %s; %d of 5 buffers reused from the optimizer pool, resident bytes +%s; "+
		"%s up, %s down, sync points: %d; verified %d words\n",
		pass, staticNote, reused, formatBytes(grown),
		formatBytes(after.HostToDeviceBytes-before.HostToDeviceBytes),
		formatBytes(after.DeviceToHostBytes-before.DeviceToHostBytes),
		after.SyncPoints-before.SyncPoints, len(in.want))
	return nil
}

// split cuts n bytes into k touching [start, end) ranges of whole words.
func split(n, k int) [][2]int {
	words := n / 4
	out := make([][2]int, 0, k)
	for i := 0; i < k; i++ {
		lo, hi := 4*(words*i/k), 4*(words*(i+1)/k)
		if hi > lo {
			out = append(out, [2]int{lo, hi})
		}
	}
	return out
}

// verifyWords checks that got holds exactly the little-endian words of want,
// naming the first mismatch and how many words differ.
func verifyWords(name string, got []byte, want []uint32) error {
	if len(got) != 4*len(want) {
		return fmt.Errorf("verify %s: read %d bytes, want %d", name, len(got), 4*len(want))
	}
	first, bad := -1, 0
	for i, w := range want {
		if binary.LittleEndian.Uint32(got[4*i:]) != w {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("verify %s: %d of %d words differ from the CPU; first at word %d: got %#x, want %#x",
			name, bad, len(want), first, binary.LittleEndian.Uint32(got[4*first:]), want[first])
	}
	return nil
}
