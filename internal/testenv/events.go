package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EventSaid waits, within timeout, for an Event of an object of kind, of type typ (any when
// empty) and reason, whose message contains every one of what. Events merged by the recorder
// are one Event with a count: it is found the same.
func EventSaid(t testing.TB, c client.Reader, timeout time.Duration, kind, typ, reason string, what ...string) {
	t.Helper()
	Eventually(t, timeout, func() string {
		var list corev1.EventList
		if err := c.List(context.Background(), &list); err != nil {
			return err.Error()
		}
		var seen []string
	events:
		for _, e := range list.Items {
			if e.InvolvedObject.Kind != kind || e.Reason != reason || (typ != "" && e.Type != typ) {
				continue
			}
			for _, w := range what {
				if !strings.Contains(e.Message, w) {
					seen = append(seen, e.Message)
					continue events
				}
			}
			return ""
		}
		return fmt.Sprintf("no %s %s Event %s saying %q; seen %q", kind, typ, reason, what, seen)
	})
}

// ConditionText is the condition typ of conditions as "STATUS REASON: MESSAGE", or "absent".
func ConditionText(conditions []metav1.Condition, typ string) string {
	c := meta.FindStatusCondition(conditions, typ)
	if c == nil {
		return "absent"
	}
	return string(c.Status) + " " + c.Reason + ": " + c.Message
}
