package children

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNamesAreDeterministicAndFitALabel(t *testing.T) {
	long := strings.Repeat("a-very-long-workflow-name-", 10)
	for _, owner := range []string{"web", long, long + "x"} {
		for _, suffix := range []string{"target", "before-view", "copy"} {
			name := Name(owner, suffix)
			if name != Name(owner, suffix) {
				t.Errorf("Name(%q, %q) is not deterministic", owner, suffix)
			}
			if errs := validation.IsValidLabelValue(name); len(errs) > 0 || !strings.HasSuffix(name, "-"+suffix) {
				t.Errorf("Name(%q, %q) = %q: %v", owner, suffix, name, errs)
			}
		}
	}
	if Name(long, "copy") == Name(long+"x", "copy") {
		t.Error("two long owners that differ only past the cut got one child name")
	}
	if got := Name("web", "target"); got != "web-target" {
		t.Errorf("a short name: %q", got)
	}
	// A cut that ends in a "." (an owner named like a domain) does not leave ".-".
	for cut := 30; cut < 50; cut++ {
		dotted := strings.Repeat("a", cut) + "." + strings.Repeat("b", 60)
		for _, suffix := range []string{"target", "20261130-0230"} {
			if name := Name(dotted, suffix); len(validation.IsDNS1123Subdomain(name)) > 0 || len(validation.IsValidLabelValue(name)) > 0 {
				t.Errorf("Name(%q, %q) = %q: %v", dotted, suffix, name, validation.IsDNS1123Subdomain(name))
			}
		}
	}
}

func TestAnOwnerKnowsItsChildrenByUID(t *testing.T) {
	o := Owner{Name: strings.Repeat("m", 80), NameLabel: "example.com/workflow", UID: "uid-1", UIDLabel: "example.com/workflow-uid", Noun: "workflow"}
	labels := o.Labels()
	for k, v := range labels {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("label %s=%q: %v", k, v, errs)
		}
	}
	if labels[LabelManagedBy] != ManagedBy {
		t.Errorf("labels %v lack %s=%s, which the operator's cache selects on", labels, LabelManagedBy, ManagedBy)
	}
	mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: labels}}
	successor := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: Owner{Name: o.Name, NameLabel: o.NameLabel, UID: "uid-2", UIDLabel: o.UIDLabel}.Labels()}}
	if !o.Owns(mine) || o.Owns(successor) || o.Owns(&corev1.ConfigMap{}) {
		t.Error("ownership is not by UID")
	}
}
