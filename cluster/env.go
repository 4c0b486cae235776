package cluster

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/vyre-go/vyrecuda/core"
)

// Launcher names the program that started the ranks, as far as their
// environment variables tell.
type Launcher int

// The launchers FromEnv understands.
const (
	// Torchrun: RANK, WORLD_SIZE and LOCAL_RANK, set by torchrun (and
	// torch.distributed's other launchers), or by hand.
	Torchrun Launcher = iota + 1
	// Slurm: SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID, set by srun.
	Slurm
	// OpenMPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE and
	// OMPI_COMM_WORLD_LOCAL_RANK, set by Open MPI's mpirun.
	OpenMPI
)

// String returns the launcher's name: "torchrun", "slurm" or "openmpi".
func (l Launcher) String() string {
	switch l {
	case Torchrun:
		return "torchrun"
	case Slurm:
		return "slurm"
	case OpenMPI:
		return "openmpi"
	}
	return "Launcher(" + strconv.Itoa(int(l)) + ")"
}

// Env is one rank's place in a job: its rank among WorldSize ranks, its
// LocalRank among the ranks on its host (which picks its device), the host
// and TCP port where rank 0 serves the communicator id (MasterAddr,
// MasterPort; see FromEnv for how they are found), and the Launcher whose
// variables said so. A job of one rank needs no master.
type Env struct {
	Rank, WorldSize, LocalRank int
	MasterAddr                 string
	MasterPort                 int
	Launcher                   Launcher
}

// Master returns "MasterAddr:MasterPort", the address rank 0 serves at.
func (e Env) Master() string { return net.JoinHostPort(e.MasterAddr, strconv.Itoa(e.MasterPort)) }

// launcherVars are the three variables of one launcher.
type launcherVars struct {
	l                 Launcher
	rank, size, local string
	name              string
}

// byPrecedence lists the launchers innermost first: torchrun starts its
// processes inside an srun or mpirun task, and mpirun runs inside a Slurm
// allocation, so the innermost launcher present describes this process.
var byPrecedence = []launcherVars{
	{Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun"},
	{OpenMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI"},
	{Slurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "Slurm"},
}

// Fix sentences of FromEnv's failures.
const (
	fixNoLauncher = "start the program with torchrun, srun or mpirun, or set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT yourself"
	fixVariable   = "start the program through its launcher, which sets these variables, or correct the ones set by hand"
	fixDisagree   = "unset RANK, WORLD_SIZE and LOCAL_RANK (left over from another job?), or set them to this process's rank and size"
)

// FromEnv reads this process's place in the job from the variables its
// launcher set: torchrun's (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT), Open MPI's (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
// OMPI_COMM_WORLD_LOCAL_RANK) or Slurm's (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID). Where several are set, the innermost launcher wins
// (torchrun, then Open MPI, then Slurm), except that RANK and WORLD_SIZE
// set without torchrun (TORCHELASTIC_RUN_ID unset) must agree with the
// other launcher's numbers.
//
// Rank 0 serves the communicator id at MASTER_ADDR. Without MASTER_ADDR, a
// Slurm job uses SLURM_LAUNCH_NODE_IPADDR (the host srun ran on, where task
// 0 runs with Slurm's default task placement) and an Open MPI job whose
// ranks all run on this host uses 127.0.0.1. The port is MASTER_PORT, or
// MASTER_PORT+1 in a process torchrun started (TORCHELASTIC_RUN_ID set),
// since torchrun's own store may listen on MASTER_PORT;
// VYRECUDA_MASTER_PORT, when set, is the port whatever the launcher. The
// port has no default outside torchrun, which always sets MASTER_PORT. A
// job of one rank needs no master.
//
// A missing, non-numeric or inconsistent variable (a rank not below the
// size, a local rank above the rank) is a *core.Error of Kind
// KindInvalidArgument naming the variables.
func FromEnv() (Env, error) { return parseEnv(os.LookupEnv) }

// lookupFunc is os.LookupEnv's shape, so tests parse maps.
type lookupFunc func(string) (string, bool)

func parseEnv(lookup lookupFunc) (Env, error) {
	const op = "cluster.FromEnv"
	var found []launcherVars
	for _, lv := range byPrecedence {
		_, hasRank := lookup(lv.rank)
		_, hasSize := lookup(lv.size)
		if hasRank || hasSize {
			found = append(found, lv)
		}
	}
	if len(found) == 0 {
		return Env{}, envError(op, "no launcher variables: none of RANK and WORLD_SIZE (torchrun), "+
			"OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (Open MPI), SLURM_PROCID and SLURM_NTASKS (Slurm) is set", fixNoLauncher)
	}
	e, err := readLauncher(op, lookup, found[0])
	if err != nil {
		return Env{}, err
	}
	if _, byTorchrun := lookup("TORCHELASTIC_RUN_ID"); e.Launcher == Torchrun && !byTorchrun && len(found) > 1 {
		if err := checkAgree(op, lookup, e, found[1]); err != nil {
			return Env{}, err
		}
	}
	if e.WorldSize == 1 {
		return e, nil
	}
	if err := readMaster(op, lookup, &e); err != nil {
		return Env{}, err
	}
	return e, nil
}

// readLauncher reads and checks one launcher's three variables.
func readLauncher(op string, lookup lookupFunc, lv launcherVars) (Env, error) {
	var v [3]int
	for i, name := range []string{lv.rank, lv.size, lv.local} {
		s, ok := lookup(name)
		if !ok {
			return Env{}, envError(op, fmt.Sprintf("%s is set but %s is not (%s's variables come together)", setOne(lookup, lv), name, lv.name), fixVariable)
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return Env{}, envError(op, fmt.Sprintf("%s=%q is not a whole number of 0 or more", name, s), fixVariable)
		}
		v[i] = n
	}
	e := Env{Rank: v[0], WorldSize: v[1], LocalRank: v[2], Launcher: lv.l}
	switch {
	case e.WorldSize < 1:
		return Env{}, envError(op, fmt.Sprintf("%s=%d: a job has at least one rank", lv.size, e.WorldSize), fixVariable)
	case e.Rank >= e.WorldSize:
		return Env{}, envError(op, fmt.Sprintf("%s=%d is not below %s=%d", lv.rank, e.Rank, lv.size, e.WorldSize), fixVariable)
	case e.LocalRank > e.Rank:
		return Env{}, envError(op, fmt.Sprintf("%s=%d is above %s=%d (the ranks on a host are numbered from the lowest global rank)",
			lv.local, e.LocalRank, lv.rank, e.Rank), fixVariable)
	}
	return e, nil
}

// setOne names the first of lv's rank and size variables that is set.
func setOne(lookup lookupFunc, lv launcherVars) string {
	if _, ok := lookup(lv.rank); ok {
		return lv.rank
	}
	return lv.size
}

// checkAgree refuses torchrun's variables set by hand that contradict the
// launcher that did start the process.
func checkAgree(op string, lookup lookupFunc, e Env, other launcherVars) error {
	o, err := readLauncher(op, lookup, other)
	if err != nil || (o.Rank == e.Rank && o.WorldSize == e.WorldSize) {
		return nil // the other launcher's variables are incomplete: nothing to compare
	}
	return envError(op, fmt.Sprintf("RANK=%d WORLD_SIZE=%d, set without torchrun, disagree with %s=%d %s=%d (%s)",
		e.Rank, e.WorldSize, other.rank, o.Rank, other.size, o.WorldSize, other.name), fixDisagree)
}

// readMaster fills e's master address and port.
func readMaster(op string, lookup lookupFunc, e *Env) error {
	addr, ok := lookup("MASTER_ADDR")
	addr = strings.TrimSpace(addr)
	switch {
	case ok && addr != "":
	case e.Launcher == Slurm:
		addr, _ = lookup("SLURM_LAUNCH_NODE_IPADDR")
		addr = strings.TrimSpace(addr)
	case e.Launcher == OpenMPI && allLocal(lookup, e.WorldSize):
		addr = "127.0.0.1"
	}
	if addr == "" {
		return envError(op, fmt.Sprintf("MASTER_ADDR is not set (%s, %d ranks)", e.Launcher, e.WorldSize), masterFix(e.Launcher))
	}
	port, err := readPort(op, lookup, e)
	if err != nil {
		return err
	}
	e.MasterAddr, e.MasterPort = addr, port
	return nil
}

// readPort returns the port rank 0 serves at: VYRECUDA_MASTER_PORT when
// set, else MASTER_PORT, plus one when torchrun started the process
// (torchrun's own store may listen on MASTER_PORT itself).
func readPort(op string, lookup lookupFunc, e *Env) (int, error) {
	name, offset := "VYRECUDA_MASTER_PORT", 0
	s, ok := lookup(name)
	if !ok {
		name = "MASTER_PORT"
		if s, ok = lookup(name); !ok {
			return 0, envError(op, fmt.Sprintf("MASTER_PORT is not set (%s, %d ranks)", e.Launcher, e.WorldSize), masterFix(e.Launcher))
		}
		if _, byTorchrun := lookup("TORCHELASTIC_RUN_ID"); byTorchrun && e.Launcher == Torchrun {
			offset = 1
		}
	}
	port, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || port < 1 || port+offset > 65535 {
		return 0, envError(op, fmt.Sprintf("%s=%q is not a TCP port (1 to %d)", name, s, 65535-offset), masterFix(e.Launcher))
	}
	return port + offset, nil
}

// allLocal reports whether Open MPI says every rank runs on this host.
func allLocal(lookup lookupFunc, world int) bool {
	s, ok := lookup("OMPI_COMM_WORLD_LOCAL_SIZE")
	n, err := strconv.Atoi(strings.TrimSpace(s))
	return ok && err == nil && n == world
}

// masterFix tells a launcher's users how to name rank 0's host and port.
func masterFix(l Launcher) string {
	switch l {
	case Slurm:
		return `export MASTER_ADDR (the job's first host: scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1) and MASTER_PORT (a free TCP port, the same for every rank) before srun`
	case OpenMPI:
		return "pass MASTER_ADDR (rank 0's host) and MASTER_PORT (a free TCP port) to every rank: mpirun -x MASTER_ADDR=host -x MASTER_PORT=29500"
	}
	return "set MASTER_ADDR to rank 0's host and MASTER_PORT to a free TCP port, the same for every rank (torchrun sets both)"
}

// envError is a launcher-variable failure.
func envError(op, detail, fix string) *core.Error {
	return &core.Error{Op: op, Kind: core.KindInvalidArgument, Detail: detail, Fix: fix}
}
