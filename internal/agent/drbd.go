package agent

import (
	"context"
	"errors"
	"fmt"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/drbd"
)

// DRBD performs the DRBD operations with drbdadm, from drbd-utils, on the resource files
// LINSTOR wrote, which it never edits. Each is safe to run again: pausing a paused resync,
// resuming a running one or adjusting a resource already as its files say changes nothing,
// so one interrupted by the agent's death is run again. DRBDVerify is not among them yet: it
// starts an online verification in the kernel whose end must be watched in drbdsetup's status.
type DRBD struct {
	Runner drbd.Runner
	// Drbdadm is how drbdadm is run: its program and any options before the command (tests
	// add drbd-utils' dry-run mode and a configuration file). ["drbdadm"] when empty.
	Drbdadm []string
}

// Executors are the DRBD operations d performs.
func (d *DRBD) Executors() map[nwv1.NodeOperationType]Executor {
	return map[nwv1.NodeOperationType]Executor{
		nwv1.OperationDRBDPauseSync: drbdExecutor{d, func(op *nwv1.NodeOperation) ([]string, error) {
			if op.Spec.DRBDPauseSync == nil {
				return nil, errMissing(op)
			}
			return drbd.PauseSyncCommand(op.Spec.DRBDPauseSync.Resource, op.Spec.DRBDPauseSync.Peer)
		}},
		nwv1.OperationDRBDResumeSync: drbdExecutor{d, func(op *nwv1.NodeOperation) ([]string, error) {
			if op.Spec.DRBDResumeSync == nil {
				return nil, errMissing(op)
			}
			return drbd.ResumeSyncCommand(op.Spec.DRBDResumeSync.Resource, op.Spec.DRBDResumeSync.Peer)
		}},
		nwv1.OperationDRBDAdjust: drbdExecutor{d, func(op *nwv1.NodeOperation) ([]string, error) {
			if op.Spec.DRBDAdjust == nil {
				return nil, errMissing(op)
			}
			return drbd.AdjustCommand(op.Spec.DRBDAdjust.Resource)
		}},
	}
}

func errMissing(op *nwv1.NodeOperation) error {
	return &OperationError{Reason: "InvalidOperation", Message: fmt.Sprintf("spec.type is %s but its parameters are missing", op.Spec.Type)}
}

// drbdExecutor runs the one drbdadm command an operation stands for.
type drbdExecutor struct {
	d       *DRBD
	command func(*nwv1.NodeOperation) ([]string, error)
}

func (e drbdExecutor) Resumable() bool { return true }

func (e drbdExecutor) Run(ctx context.Context, op *nwv1.NodeOperation) (*nwv1.NodeOperationResult, error) {
	argv, err := e.command(op)
	if err != nil {
		var failed *OperationError
		if errors.As(err, &failed) {
			return nil, failed
		}
		// The API's patterns should have refused it; drbd's own check is the last word.
		return nil, &OperationError{Reason: "InvalidOperation", Message: err.Error()}
	}
	if len(e.d.Drbdadm) > 0 {
		argv = append(append([]string{}, e.d.Drbdadm...), argv[1:]...)
	}
	if _, err := e.d.Runner.Run(ctx, argv); err != nil {
		return nil, err // a *drbd.CommandError, quoting drbdadm: CommandFailed
	}
	return &nwv1.NodeOperationResult{}, nil
}
