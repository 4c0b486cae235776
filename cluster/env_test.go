package cluster

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// vars is an environment for parseEnv.
type vars map[string]string

func (v vars) lookup(k string) (string, bool) { s, ok := v[k]; return s, ok }

// with returns v plus the pairs of more.
func (v vars) with(more vars) vars {
	out := vars{}
	for k, s := range v {
		out[k] = s
	}
	for k, s := range more {
		out[k] = s
	}
	return out
}

var (
	torchrunVars = vars{"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
		"TORCHELASTIC_RUN_ID": "none"}
	slurmVars = vars{"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_LAUNCH_NODE_IPADDR": "10.1.2.3",
		"MASTER_PORT": "29400"}
	ompiVars = vars{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "2",
		"OMPI_COMM_WORLD_LOCAL_SIZE": "4", "MASTER_PORT": "29600"}
)

func TestFromEnvLaunchers(t *testing.T) {
	tests := map[string]struct {
		env  vars
		want Env
	}{
		// torchrun's own store may hold MASTER_PORT: rank 0 serves one above.
		"torchrun":            {torchrunVars, Env{Rank: 5, WorldSize: 8, LocalRank: 1, MasterAddr: "10.0.0.1", MasterPort: 29501, Launcher: Torchrun}},
		"torchrun by hand":    {vars{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h0", "MASTER_PORT": "1"}, Env{WorldSize: 2, MasterAddr: "h0", MasterPort: 1, Launcher: Torchrun}},
		"slurm":               {slurmVars, Env{Rank: 3, WorldSize: 4, LocalRank: 1, MasterAddr: "10.1.2.3", MasterPort: 29400, Launcher: Slurm}},
		"slurm MASTER_ADDR":   {slurmVars.with(vars{"MASTER_ADDR": "node7"}), Env{Rank: 3, WorldSize: 4, LocalRank: 1, MasterAddr: "node7", MasterPort: 29400, Launcher: Slurm}},
		"openmpi one host":    {ompiVars, Env{Rank: 2, WorldSize: 4, LocalRank: 2, MasterAddr: "127.0.0.1", MasterPort: 29600, Launcher: OpenMPI}},
		"openmpi addr":        {ompiVars.with(vars{"MASTER_ADDR": "head", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}), Env{Rank: 2, WorldSize: 4, LocalRank: 2, MasterAddr: "head", MasterPort: 29600, Launcher: OpenMPI}},
		"one rank, no master": {vars{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, Env{WorldSize: 1, Launcher: OpenMPI}},
		"override":            {torchrunVars.with(vars{"VYRECUDA_MASTER_PORT": "4000"}), Env{Rank: 5, WorldSize: 8, LocalRank: 1, MasterAddr: "10.0.0.1", MasterPort: 4000, Launcher: Torchrun}},
		"slurm override":      {slurmVars.with(vars{"VYRECUDA_MASTER_PORT": "4001"}), Env{Rank: 3, WorldSize: 4, LocalRank: 1, MasterAddr: "10.1.2.3", MasterPort: 4001, Launcher: Slurm}},
		"spaces":              {vars{"RANK": " 1", "WORLD_SIZE": "2 ", "LOCAL_RANK": "0", "MASTER_ADDR": " h ", "MASTER_PORT": " 80"}, Env{Rank: 1, WorldSize: 2, MasterAddr: "h", MasterPort: 80, Launcher: Torchrun}},
		// srun starts one torchrun per host; torchrun's variables describe the process.
		"torchrun under srun": {torchrunVars.with(vars{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"}),
			Env{Rank: 5, WorldSize: 8, LocalRank: 1, MasterAddr: "10.0.0.1", MasterPort: 29501, Launcher: Torchrun}},
		// mpirun inside an allocation: the batch shell's Slurm variables are stale.
		"mpirun under slurm": {ompiVars.with(vars{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0"}),
			Env{Rank: 2, WorldSize: 4, LocalRank: 2, MasterAddr: "127.0.0.1", MasterPort: 29600, Launcher: OpenMPI}},
		// RANK set by hand from the launcher's numbers agrees: fine.
		"by hand, agreeing": {slurmVars.with(vars{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "h"}),
			Env{Rank: 3, WorldSize: 4, LocalRank: 1, MasterAddr: "h", MasterPort: 29400, Launcher: Torchrun}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseEnv(tt.env.lookup)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	tests := map[string]struct {
		env  vars
		want []string // in the message
	}{
		"nothing":          {vars{"MASTER_PORT": "1"}, []string{"no launcher variables", "RANK and WORLD_SIZE"}},
		"no WORLD_SIZE":    {vars{"RANK": "0", "LOCAL_RANK": "0"}, []string{"RANK is set but WORLD_SIZE is not"}},
		"no LOCAL_RANK":    {vars{"RANK": "0", "WORLD_SIZE": "2"}, []string{"RANK is set but LOCAL_RANK is not"}},
		"no SLURM_PROCID":  {vars{"SLURM_NTASKS": "2", "SLURM_LOCALID": "0"}, []string{"SLURM_NTASKS is set but SLURM_PROCID is not"}},
		"not a number":     {vars{"RANK": "0", "WORLD_SIZE": "two", "LOCAL_RANK": "0"}, []string{`WORLD_SIZE="two" is not a whole number`}},
		"empty":            {vars{"OMPI_COMM_WORLD_RANK": "", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, []string{`OMPI_COMM_WORLD_RANK="" is not`}},
		"negative":         {vars{"RANK": "-1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, []string{`RANK="-1" is not`}},
		"rank >= size":     {vars{"SLURM_PROCID": "4", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0"}, []string{"SLURM_PROCID=4 is not below SLURM_NTASKS=4"}},
		"size 0":           {vars{"RANK": "0", "WORLD_SIZE": "0", "LOCAL_RANK": "0"}, []string{"WORLD_SIZE=0"}},
		"local above rank": {vars{"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "2"}, []string{"LOCAL_RANK=2 is above RANK=1"}},
		"launchers disagree": {vars{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}.with(ompiVars),
			[]string{"RANK=0 WORLD_SIZE=2, set without torchrun, disagree with OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=4 (Open MPI)", "unset RANK"}},
		"no MASTER_PORT":    {vars{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h"}, []string{"MASTER_PORT is not set (torchrun, 2 ranks)"}},
		"port too big":      {torchrunVars.with(vars{"MASTER_PORT": "70000"}), []string{`MASTER_PORT="70000" is not a TCP port`}},
		"port not a number": {torchrunVars.with(vars{"MASTER_PORT": "http"}), []string{`MASTER_PORT="http"`}},
		"no port above":     {torchrunVars.with(vars{"MASTER_PORT": "65535"}), []string{`MASTER_PORT="65535" is not a TCP port (1 to 65534)`}},
		"bad override":      {torchrunVars.with(vars{"VYRECUDA_MASTER_PORT": "0"}), []string{`VYRECUDA_MASTER_PORT="0" is not a TCP port (1 to 65535)`}},
		"slurm no master":   {vars{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "MASTER_PORT": "1"}, []string{"MASTER_ADDR is not set (slurm, 2 ranks)", "scontrol show hostnames"}},
		"openmpi two hosts": {ompiVars.with(vars{"OMPI_COMM_WORLD_LOCAL_SIZE": "2"}), []string{"MASTER_ADDR is not set (openmpi, 4 ranks)", "mpirun -x MASTER_ADDR"}},
		"empty MASTER_ADDR": {torchrunVars.with(vars{"MASTER_ADDR": " "}), []string{"MASTER_ADDR is not set"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseEnv(tt.env.lookup)
			assert.Zero(t, got)
			requireEnvError(t, "cluster.FromEnv", err, tt.want...)
		})
	}
}

// requireEnvError checks a launcher-variable failure: a *core.Error of
// KindInvalidArgument from op, with one Fix sentence and the texts wanted.
func requireEnvError(t *testing.T, op string, err error, want ...string) *core.Error {
	t.Helper()
	var e *core.Error
	require.True(t, errors.As(err, &e), "want *core.Error, got %v", err)
	assert.Equal(t, op, e.Op)
	assert.ErrorIs(t, err, core.ErrInvalidArgument)
	assert.Equal(t, 1, strings.Count(err.Error(), "Fix: "), "%v", err)
	for _, w := range want {
		assert.Contains(t, err.Error(), w)
	}
	return e
}

// launcherNames are every variable FromEnv reads.
var launcherNames = []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "VYRECUDA_MASTER_PORT", "TORCHELASTIC_RUN_ID",
	"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_LAUNCH_NODE_IPADDR",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}

// setLauncherEnv makes the process environment hold exactly v's launcher
// variables for the rest of the test (a CI job may itself run under one).
func setLauncherEnv(t *testing.T, v vars) {
	for _, k := range launcherNames {
		t.Setenv(k, "")
		require.NoError(t, os.Unsetenv(k))
	}
	for k, s := range v {
		t.Setenv(k, s)
	}
}

func TestFromEnvReadsTheProcessEnvironment(t *testing.T) {
	setLauncherEnv(t, slurmVars)
	e, err := FromEnv()
	require.NoError(t, err)
	assert.Equal(t, Env{Rank: 3, WorldSize: 4, LocalRank: 1, MasterAddr: "10.1.2.3", MasterPort: 29400, Launcher: Slurm}, e)
	assert.Equal(t, "10.1.2.3:29400", e.Master())
	setLauncherEnv(t, nil)
	_, err = FromEnv()
	requireEnvError(t, "cluster.FromEnv", err, "no launcher variables")
}

func TestLauncherString(t *testing.T) {
	assert.Equal(t, "torchrun", Torchrun.String())
	assert.Equal(t, "slurm", Slurm.String())
	assert.Equal(t, "openmpi", OpenMPI.String())
	assert.Equal(t, "Launcher(0)", Launcher(0).String())
}

func TestEnvDevice(t *testing.T) {
	for _, tt := range []struct{ local, visible, want int }{{0, 1, 0}, {1, 2, 1}, {3, 8, 3}, {3, 1, 0}} {
		got, err := Env{LocalRank: tt.local}.Device(tt.visible)
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, "local rank %d, %d visible", tt.local, tt.visible)
	}
	_, err := Env{LocalRank: 2}.Device(2)
	requireEnvError(t, "cluster.Env.Device", err, "local rank 2, but this process sees 2 CUDA devices", "--nproc-per-node")
	_, err = Env{}.Device(0)
	requireEnvError(t, "cluster.Env.Device", err, "0 visible CUDA devices")
	_, err = Env{LocalRank: -1}.Device(2)
	requireEnvError(t, "cluster.Env.Device", err, "local rank -1")
}
