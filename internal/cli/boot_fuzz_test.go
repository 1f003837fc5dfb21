package cli

import (
	"maps"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/bootrecoverypolicy"
)

// FuzzBootAcknowledgement: whatever the annotation holds and whatever boot ID a node's agent
// reports for its fallback, boot ack either refuses or writes an annotation that, read as the
// operator reads it (bootrecoverypolicy.Acknowledgements), acknowledges that node's boot and
// changes no other node's acknowledgement: a boot ID cannot smuggle in an entry of its own.
func FuzzBootAcknowledgement(f *testing.F) {
	for _, seed := range [][2]string{
		{"", "9b2d77e0-1111-4222-8333-444455556666"},
		{"edge-3@b-3, edge-2@old", "b-2"},
		{"edge-1@x,edge-1@y", "b,edge-1@z"},
		{"edge-2", "b@c"},
		{"@b,,edge-4@b-4 ", " b"},
		{"edge-2@b-2", "b-2"},
		{"x@1", "\x1b[2J"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, annotation, bootID string) {
		p := &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.BootRecoveryPolicyName,
			Annotations: map[string]string{nwv1.AnnotationAcknowledgeFallback: annotation}}}
		p.Status.Nodes = []nwv1.NodeBootRecord{{Name: "edge-2", LastFallback: &nwv1.KairosFallback{FromImage: "a", BootID: bootID}}}
		boots, err := fallbackBoots(p, []string{"edge-2"})
		if err != nil {
			return
		}
		written := withAcknowledgements(annotation, []string{"edge-2"}, boots)
		before := bootrecoverypolicy.Acknowledgements(p)
		p.Annotations[nwv1.AnnotationAcknowledgeFallback] = written
		after := bootrecoverypolicy.Acknowledgements(p)
		if after["edge-2"] != bootID {
			t.Fatalf("annotation %q, boot %q: wrote %q, which acknowledges edge-2 at %q", annotation, bootID, written, after["edge-2"])
		}
		delete(before, "edge-2")
		delete(after, "edge-2")
		if !maps.Equal(before, after) {
			t.Fatalf("annotation %q, boot %q: wrote %q, which changes the other nodes' acknowledgements from %v to %v", annotation, bootID, written, before, after)
		}
	})
}
