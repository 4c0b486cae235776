package core_test

import (
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/vyre-go/vyrecuda/core"
)

// ExampleOpenDefault opens the GPU when there is one and the simulated
// device otherwise, and logs which and why. Here VYRECUDA_DEVICE=sim
// forces the simulated device, so the output is the same on every machine;
// the log line goes to stdout without its time.
func ExampleOpenDefault() {
	os.Setenv(core.DeviceEnv, "sim") // as `VYRECUDA_DEVICE=sim go run .` would
	defer os.Unsetenv(core.DeviceEnv)
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))
	b, err := core.OpenDefault(core.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	fmt.Println("running on:", b.DeviceInfo().Name)
	// Output:
	// level=INFO msg="vyrecuda: opened the default device" device=sim name="vyrecuda simulated device" memory=1073741824 reason="VYRECUDA_DEVICE=sim"
	// running on: vyrecuda simulated device
}
