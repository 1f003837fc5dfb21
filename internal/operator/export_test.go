package operator

import (
	"context"
	"errors"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/audit"
)

// RunAuditTrail runs the operator's audit trail as the leader does, with its shipper when
// opts ship it, until stop is called; it returns once the trail is open, with its Append and
// Checkpoint. stop returns once the trail is closed and the shipper stopped.
func RunAuditTrail(cfg *rest.Config, c client.Client, opts AuditOptions) (
	appendRecords func(context.Context, ...audit.Record) error, checkpoint func(context.Context) error, stop func(), err error) {
	if err := opts.validate(); err != nil {
		return nil, nil, nil, err
	}
	t, err := newAuditTrail(cfg, c, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	shipper, err := t.shipper()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	running.Go(func() { _ = t.Start(ctx) })
	if shipper != nil {
		running.Go(func() { _ = shipper.Start(ctx) })
	}
	stop = func() { cancel(); running.Wait() }
	<-t.ready
	if t.openErr != nil {
		stop()
		return nil, nil, nil, t.openErr
	}
	appendRecords = func(ctx context.Context, records ...audit.Record) error {
		_, err := t.Append(ctx, records...)
		return err
	}
	checkpoint = func(ctx context.Context) error {
		if t.log == nil {
			return errors.New("no trail")
		}
		_, err := t.log.Checkpoint(ctx)
		return err
	}
	return appendRecords, checkpoint, stop, nil
}
