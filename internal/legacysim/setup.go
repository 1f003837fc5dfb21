package legacysim

import (
	"context"
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/legacy"
)

// kwok runs pods only on its own nodes, which carry this label and taint.
const (
	kwokNodeLabel, kwokNodeValue = "type", "kwok"
	kwokTaintKey, kwokTaintValue = "kwok.x-k8s.io/node", "fake"
)

// Setup creates what a freshly installed DaemonSet has: its namespace(s), the DaemonSet
// object, and the state ConfigMap at INIT, generation 1, with the primary node alone. Objects
// that already exist are left as they are, so Setup on a running site changes nothing.
func (s *Simulator) Setup(ctx context.Context) error {
	for _, ns := range []string{s.cfg.ConfigMap.Namespace, s.cfg.DaemonSet.Namespace} {
		if err := s.createIfMissing(ctx, "Namespace", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	if err := s.createIfMissing(ctx, "DaemonSet", s.daemonSet()); err != nil {
		return err
	}
	return s.createIfMissing(ctx, "ConfigMap", s.initialConfigMap(time.Now()))
}

func (s *Simulator) createIfMissing(ctx context.Context, kind string, obj client.Object) error {
	key := client.ObjectKeyFromObject(obj).String()
	if obj.GetNamespace() == "" {
		key = obj.GetName()
	}
	err := s.cfg.Client.Create(ctx, obj)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating %s %s: %w", kind, key, err)
	}
	s.log.Info("Created", "kind", kind, "object", key)
	return nil
}

func (s *Simulator) initialConfigMap(now time.Time) *corev1.ConfigMap {
	primary := s.Primary()
	data := map[string]string{
		legacy.KeyState:         string(legacy.Init),
		legacy.KeyPreviousState: "",
		legacy.KeyStateSince:    timestamp(now),
		legacy.KeyGeneration:    strconv.Itoa(1),
		legacy.KeyNodes:         primary.Name,
	}
	writeNode(data, primary, now)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: s.cfg.ConfigMap.Name, Namespace: s.cfg.ConfigMap.Namespace},
		Data:       data,
	}
}

// daemonSet is a DaemonSet kwok can "run" on its fake nodes; nothing executes in it.
func (s *Simulator) daemonSet() *appsv1.DaemonSet {
	labels := map[string]string{"app.kubernetes.io/name": s.cfg.DaemonSet.Name, "app.kubernetes.io/component": s.cfg.Component}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: s.cfg.DaemonSet.Name, Namespace: s.cfg.DaemonSet.Namespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{kwokNodeLabel: kwokNodeValue},
					Tolerations: []corev1.Toleration{{
						Key: kwokTaintKey, Operator: corev1.TolerationOpEqual, Value: kwokTaintValue, Effect: corev1.TaintEffectNoSchedule,
					}},
					Containers: []corev1.Container{{Name: "node-init", Image: s.cfg.Image}},
				},
			},
		},
	}
}
