package vmvolumemigration

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"k8s.io/client-go/kubernetes"
)

// unfreezeGracePeriod is how long KubeVirt keeps a guest frozen if the thaw never comes (the
// operator dying between FreezeGuest and ThawGuest, say).
const unfreezeGracePeriod = 2 * time.Minute

// setFrozen freezes or thaws the guest's file systems through its agent, with KubeVirt's
// virt-api subresource (PUT .../virtualmachineinstances/NAME/freeze or /unfreeze).
func setFrozen(ctx context.Context, cs kubernetes.Interface, namespace, vmi string, frozen bool) error {
	if cs == nil {
		return fmt.Errorf("no API client for KubeVirt's subresources")
	}
	verb, body := "unfreeze", []byte(`{}`)
	if frozen {
		var err error
		verb = "freeze"
		body, err = json.Marshal(virtv1.FreezeUnfreezeTimeout{UnfreezeTimeout: &metav1.Duration{Duration: unfreezeGracePeriod}})
		if err != nil {
			return err
		}
	}
	path := fmt.Sprintf("/apis/subresources.kubevirt.io/v1/namespaces/%s/virtualmachineinstances/%s/%s", namespace, vmi, verb)
	if err := cs.CoreV1().RESTClient().Put().AbsPath(path).SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error(); err != nil {
		return fmt.Errorf("%s of VirtualMachineInstance %s: %w", verb, vmi, err)
	}
	return nil
}
