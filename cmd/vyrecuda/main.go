// Command vyrecuda shows what the vyrecuda library does on this machine.
//
//	vyrecuda info                     driver version and devices (or the simulated one)
//	vyrecuda demo [-device auto]      a resident pipeline end to end, verified on the CPU
//	vyrecuda bench [-out DIR] [...]   workloads W1-W8, W1G, W3G, W5G, W5C and a bandwidth sweep, as a table, JSON and SVG
//	vyrecuda allreduce [...]          one rank of a torchrun, srun or mpirun job: an all-reduce checked on the host
//	vyrecuda memplot snapshot.json    a memory snapshot's timeline as SVG
//
// It is built with the standard library's flag package only: the command adds
// no dependency to the module. Exit status: 0 success, 1 failure, 2 bad usage.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usageText = `vyrecuda keeps data resident on NVIDIA GPUs from Go; this command shows it at work.

Usage:
  vyrecuda info   [-ordinal N]
  vyrecuda demo   [-device auto|sim|cuda] [-ordinal N] [-words N]
  vyrecuda bench  [-device auto|sim|cuda] [-out DIR] [-repeats N] [-large SIZE] ...
  vyrecuda allreduce [-device auto|sim|cuda] [-size SIZE] [-iters N] [-timeout D]
  vyrecuda memplot snapshot.json [-o memory.svg] [-top N]
  vyrecuda help

Run "vyrecuda COMMAND -h" for a command's flags. -device auto (the default)
uses the GPU when a CUDA driver and device are present, otherwise the simulated
device, and says which; VYRECUDA_DEVICE=sim, cuda or cuda:N decides instead
when set. Sizes accept B, KiB, MiB and GiB suffixes.
Exit status: 0 success, 1 failure, 2 bad usage.
`

// run executes one command line (without the program name) and returns the
// exit status. All output goes to stdout and stderr, so tests drive it whole.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	switch args[0] {
	case "info":
		return runInfo(args[1:], stdout, stderr)
	case "demo":
		return runDemo(args[1:], stdout, stderr)
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "allreduce":
		return runAllreduce(args[1:], stdout, stderr)
	case "memplot":
		return runMemplot(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usageText)
		return exitOK
	default:
		fmt.Fprintf(stderr, "vyrecuda: unknown command %q\n\n%s", args[0], usageText)
		return exitUsage
	}
}

// parseFlags parses a subcommand's flags. It returns done=true with the exit
// status when the command must stop: after -h (status 0) or on bad usage
// (status 2, with the reason and the flag list on stderr).
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, done bool) {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, true
		}
		return exitUsage, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "vyrecuda %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return exitUsage, true
	}
	return exitOK, false
}

// fail reports err for command cmd and returns the failure status.
func fail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "vyrecuda %s: %v\n", cmd, err)
	return exitFail
}
