package operator

import (
	"context"
	"errors"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/audit"
)

// RunAuditTrail runs the operator's audit trail as the leader does, with its shipper when
// opts ship it, until ctx ends; it returns once the trail is open, with its Append and
// Checkpoint.
func RunAuditTrail(ctx context.Context, cfg *rest.Config, c client.Client, opts AuditOptions) (
	appendRecords func(context.Context, ...audit.Record) error, checkpoint func(context.Context) error, err error) {
	if err := opts.validate(); err != nil {
		return nil, nil, err
	}
	t, err := newAuditTrail(cfg, c, opts)
	if err != nil {
		return nil, nil, err
	}
	shipper, err := t.shipper()
	if err != nil {
		return nil, nil, err
	}
	go func() { _ = t.Start(ctx) }()
	if shipper != nil {
		go func() { _ = shipper.Start(ctx) }()
	}
	<-t.ready
	if t.openErr != nil {
		return nil, nil, t.openErr
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
	return appendRecords, checkpoint, nil
}
