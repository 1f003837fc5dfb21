package bondmodeflipplan

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/nodecordon"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// The reasons of the cordon's Events.
const (
	ReasonCordoned     = nodecordon.ReasonCordoned
	ReasonUncordoned   = nodecordon.ReasonUncordoned
	ReasonLeftCordoned = nodecordon.ReasonLeftCordoned
)

// The Node itself is the record of a flip's cordon (internal/nodecordon): status.nodes[].cordon
// only shows what the parts found.

// cordon makes node k unschedulable for its change (Cordon, RollbackCordon), unless it is
// already: then it is left alone, and stays as it is after the flip.
func (r *Reconciler) cordon(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	name := s.node(k)
	res, err := nodecordon.Cordon(ctx, r.Client, r.APIReader, name, bondflip.CordonedBy(s.f.Name), "flip")
	return r.cordoned(s, k, res, " for its change"), err
}

// uncordon makes node k schedulable again after its change (Uncordon, RollbackUncordon), only
// if it carries this flip's annotation; the annotation goes in the same write.
func (r *Reconciler) uncordon(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	rec := &s.f.Status.Nodes[k-1]
	res, err := nodecordon.Uncordon(ctx, r.Client, r.APIReader, s.node(k), bondflip.CordonedBy(s.f.Name), "flip", rec.Cordon)
	return r.cordoned(s, k, res, " after its change"), err
}

// cordoned records what a cordon or an uncordon of node k did, with its Event (the message
// and why).
func (r *Reconciler) cordoned(s *scope, k int, res nodecordon.Result, why string) engine.Outcome {
	if res.Cordon != "" {
		s.f.Status.Nodes[k-1].Cordon = res.Cordon
	}
	switch res.Reason {
	case "":
	case nodecordon.ReasonLeftCordoned:
		r.event(s, corev1.EventTypeNormal, res.Reason, res.Message)
	default:
		r.event(s, corev1.EventTypeNormal, res.Reason, res.Message+why)
	}
	if res.Skipped {
		return engine.Skipped("%s", res.Message)
	}
	return engine.Succeeded("%s", res.Message)
}

func (r *Reconciler) event(s *scope, eventType, reason, msg string) {
	if r.Recorder != nil {
		r.Recorder.Event(s.f, eventType, reason, msg)
	}
}
