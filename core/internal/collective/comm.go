package collective

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
)

// Of returns drv's driver.CollectiveDriver, or a KindUnsupported error
// naming drv's type with fix.
func Of(op string, drv driver.Driver, fix string) (driver.CollectiveDriver, error) {
	cd, ok := drv.(driver.CollectiveDriver)
	if !ok {
		return nil, errs.New(op, errs.KindUnsupported, fmt.Sprintf("the driver %T has no collectives", drv), fix)
	}
	return cd, nil
}

// Build creates one communicator per driver through cd, rank i on
// drivers[i]. A driver that returns a communicator count other than the
// number of drivers gets the ones it returned destroyed, and Build reports
// a null success.
func Build(op string, cd driver.CollectiveDriver, drivers []driver.Driver) ([]driver.Communicator, error) {
	comms, err := cd.NewCommunicators(drivers)
	if err != nil {
		return nil, CommError(op, "NewCommunicators", err)
	}
	if len(comms) != len(drivers) {
		for _, c := range comms {
			if c != nil {
				_ = c.Destroy() // the driver misbehaved; its error adds nothing
			}
		}
		return nil, errs.NullSuccess(op, "NewCommunicators")
	}
	return comms, nil
}

// CommError wraps a failure to create or join communicators: a missing
// library (NCCL not installed, reported as a KindUnsupported *errs.Error)
// keeps its kind and Fix under op; anything else is a driver failure.
func CommError(op, call string, err error) *errs.Error {
	if e, ok := err.(*errs.Error); ok && e.Kind == errs.KindUnsupported {
		c := *e
		c.Op = op
		return &c
	}
	return errs.Driver(op, call, err)
}
