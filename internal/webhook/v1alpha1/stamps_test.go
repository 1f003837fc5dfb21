package v1alpha1

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

const (
	approve   = nwv1.AnnotationApprove
	approver  = nwv1.AnnotationApprovedBy
	requested = nwv1.AnnotationRequestedBy
)

// stampReq is bob's request to turn old (nil: a create) into an object with annotations.
func stampReq(t *testing.T, old, annotations map[string]string) (admission.Request, *nwv1.BondModeFlipPlan) {
	t.Helper()
	obj := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "to-lacp", Annotations: annotations}}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, UserInfo: authenticationv1.UserInfo{Username: "bob"}}}
	if old != nil {
		raw, err := json.Marshal(&nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "to-lacp", Annotations: old}})
		if err != nil {
			t.Fatal(err)
		}
		req.Operation, req.OldObject = admissionv1.Update, runtime.RawExtension{Raw: raw}
	}
	return req, obj
}

// applied is annotations after the stamps' patch operations.
func applied(t *testing.T, annotations map[string]string, req admission.Request, obj *nwv1.BondModeFlipPlan) (map[string]string, []stampDecision) {
	t.Helper()
	patches, decisions, err := stampPatches(req, obj)
	if err != nil {
		t.Fatal(err)
	}
	out := maps.Clone(annotations)
	for _, p := range patches {
		switch {
		case p.Path == "/metadata/annotations" && p.Operation == "add" && out == nil:
			out = maps.Clone(p.Value.(map[string]string))
		case strings.HasPrefix(p.Path, "/metadata/annotations/") && out != nil:
			key := strings.NewReplacer("~1", "/", "~0", "~").Replace(strings.TrimPrefix(p.Path, "/metadata/annotations/"))
			if p.Operation == "remove" {
				if _, ok := out[key]; !ok {
					t.Fatalf("removes %s, which is not there", key)
				}
				delete(out, key)
			} else {
				out[key] = p.Value.(string)
			}
		default:
			t.Fatalf("unexpected operation %+v on annotations %v", p, out)
		}
	}
	return out, decisions
}

func TestTheStampsOfARequest(t *testing.T) {
	for _, c := range []struct {
		name             string
		old, annotations map[string]string // old nil: a create
		want             map[string]string
		recorded         string // the messages recorded, one a line
	}{
		{"create without annotations", nil, nil,
			map[string]string{requested: "bob"}, ""},
		{"create approving", nil, map[string]string{approve: "Node1SetBondMode"},
			map[string]string{requested: "bob", approve: "Node1SetBondMode", approver: "bob"}, ""},
		{"create with a forged approver", nil, map[string]string{approve: "Node1SetBondMode", approver: "mallory", requested: "mallory"},
			map[string]string{requested: "bob", approve: "Node1SetBondMode", approver: "bob"},
			`the request set nodewright.spectrocloud.com/requested-by to "mallory"; it stays "bob"` + "\n" +
				`the request set nodewright.spectrocloud.com/approved-by to "mallory"; it stays "bob"`},
		{"create with an approver and nothing approved", nil, map[string]string{approver: "mallory"},
			map[string]string{requested: "bob"},
			`the request set nodewright.spectrocloud.com/approved-by to "mallory" without setting nodewright.spectrocloud.com/approve; removed`},
		{"update leaving both", map[string]string{requested: "alice", approve: "A", approver: "alice"},
			map[string]string{requested: "alice", approve: "A", approver: "alice", "team": "x"},
			map[string]string{requested: "alice", approve: "A", approver: "alice", "team": "x"}, ""},
		{"update forging the approver", map[string]string{requested: "alice", approve: "A", approver: "alice"},
			map[string]string{requested: "alice", approve: "A", approver: "bob"},
			map[string]string{requested: "alice", approve: "A", approver: "alice"},
			`the request set nodewright.spectrocloud.com/approved-by to "bob"; it stays "alice"`},
		{"update removing the approver", map[string]string{requested: "alice", approve: "A", approver: "alice"},
			map[string]string{requested: "alice", approve: "A"},
			map[string]string{requested: "alice", approve: "A", approver: "alice"},
			`the request removed nodewright.spectrocloud.com/approved-by; it stays "alice"`},
		{"update approving the next step", map[string]string{requested: "alice", approve: "A", approver: "alice"},
			map[string]string{requested: "alice", approve: "B", approver: "alice"},
			map[string]string{requested: "alice", approve: "B", approver: "bob"}, ""},
		{"update approving for the first time", map[string]string{requested: "alice"},
			map[string]string{requested: "alice", approve: "A"},
			map[string]string{requested: "alice", approve: "A", approver: "bob"}, ""},
		{"update withdrawing the approval", map[string]string{requested: "alice", approve: "A", approver: "alice"},
			map[string]string{requested: "alice", approver: "alice"},
			map[string]string{requested: "alice"}, ""},
		{"update withdrawing the approval and forging", map[string]string{requested: "alice", approve: "A", approver: "alice"},
			map[string]string{requested: "alice", approver: "bob"},
			map[string]string{requested: "alice"},
			`the request set nodewright.spectrocloud.com/approved-by to "bob" without setting nodewright.spectrocloud.com/approve; removed`},
		{"update of an approval stored before the webhook", map[string]string{approve: "A"},
			map[string]string{approve: "A", "team": "x"},
			map[string]string{approve: "A", "team": "x"}, ""},
		{"update forging both", map[string]string{requested: "alice"},
			map[string]string{requested: "bob", approver: "bob"},
			map[string]string{requested: "alice"},
			`the request set nodewright.spectrocloud.com/requested-by to "bob"; it stays "alice"` + "\n" +
				`the request set nodewright.spectrocloud.com/approved-by to "bob" without setting nodewright.spectrocloud.com/approve; removed`},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, obj := stampReq(t, c.old, c.annotations)
			got, decisions := applied(t, c.annotations, req, obj)
			if !maps.Equal(got, c.want) {
				t.Errorf("annotations %v, want %v", got, c.want)
			}
			var messages []string
			for _, d := range decisions {
				messages = append(messages, d.message)
			}
			if got := strings.Join(messages, "\n"); got != c.recorded {
				t.Errorf("recorded %q, want %q", got, c.recorded)
			}

			// What the stamps wrote passes their check; anything else is refused, naming the
			// annotation.
			ctx := admission.NewContextWithRequest(context.Background(), req)
			obj.Annotations = got
			if err := checkStamps(ctx, obj); err != nil {
				t.Errorf("the stamped object is refused: %v", err)
			}
			obj.Annotations = maps.Clone(got)
			if obj.Annotations == nil {
				obj.Annotations = map[string]string{}
			}
			obj.Annotations[approver] = "mallory"
			want := "metadata.annotations[nodewright.spectrocloud.com/approved-by]: is set by Nodewright's admission webhook to the user who set nodewright.spectrocloud.com/approve and cannot be changed"
			if err := checkStamps(ctx, obj); err == nil || err.Error() != want {
				t.Errorf("an approver changed after the stamp: %v, want %q", err, want)
			}
		})
	}
}
