package linstorgate

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spectrocloud/nodewright/internal/linstor"
)

// checkDelete lets a resource be deleted only if the gate created it (it carries the gate's
// stamp), and, when it holds data, only while another diskful replica of the definition
// stays: one known UpToDate, unless the one deleted is known not to be (it holds no whole
// copy). LINSTOR's state is read by the gate itself; nothing the operator says counts. A
// resource that is not there is reported absent: the gate answers as LINSTOR would, without
// forwarding a deletion that could meet a resource created in between.
func checkDelete(ctx context.Context, lin *linstor.Client, method, path, def, node string) (refusal *Refusal, absent bool, err error) {
	all, err := lin.Resources(ctx, linstor.ResourceFilter{Definitions: []string{def}})
	if err != nil {
		return nil, false, err
	}
	i := slices.IndexFunc(all, func(r linstor.Resource) bool {
		return strings.EqualFold(r.Definition, def) && strings.EqualFold(r.Node, node)
	})
	if i < 0 {
		return nil, true, nil
	}
	target := all[i]
	if target.Props[linstor.GateStampProp] != linstor.GateStampValue {
		return refuse(method, path, ReasonNotPlacedByTheGate, linstor.GateStampProp,
			"the resource of %s on %s does not carry %s=%s: the gate did not create it, and deletes only what it created (never a replica LINSTOR held before)",
			def, node, linstor.GateStampProp, linstor.GateStampValue), false, nil
	}
	if target.Diskless || target.Deleting {
		return nil, false, nil
	}
	var others []linstor.Resource
	for j, r := range all {
		if j != i && !r.Diskless && !r.Deleting && strings.EqualFold(r.Definition, def) {
			others = append(others, r)
		}
	}
	if len(others) == 0 {
		return refuse(method, path, ReasonLastCopy, "", "the replica of %s on %s is its last diskful replica", def, node), false, nil
	}
	whole := slices.ContainsFunc(others, linstor.Resource.UpToDate)
	holdsNoWholeCopy := target.StateKnown() && !target.UpToDate()
	if !whole && !holdsNoWholeCopy {
		return refuse(method, path, ReasonLastCopy, "", "the replica of %s on %s may hold the only whole copy: no other replica is known UpToDate (%s)", def, node, describeStates(others)), false, nil
	}
	return nil, false, nil
}

// warnNotFound is LINSTOR's return code of a deletion that found nothing to delete: a warning
// (MASK_WARN | MASK_RSC | MASK_DEL | WARN_NOT_FOUND), which its clients take as success.
const warnNotFound = -1<<63 | 0x340000 | 0x3000000 | 3000

// notThere is LINSTOR's answer to the deletion of a resource that is not there.
func notThere(def, node string) []map[string]any {
	return []map[string]any{{"ret_code": int64(warnNotFound), "message": fmt.Sprintf("Resource '%s' on node '%s' not found.", def, node),
		"details": "nodewright-linstor-gate: nothing to delete; LINSTOR was not asked."}}
}

func describeStates(rs []linstor.Resource) string {
	var out []string
	for _, r := range rs {
		state := "state unknown"
		if r.StateKnown() {
			var disks []string
			for _, v := range r.Volumes {
				disks = append(disks, v.DiskState)
			}
			state = strings.Join(slices.Compact(disks), ", ")
		}
		out = append(out, fmt.Sprintf("%s: %s", r.Node, state))
	}
	return strings.Join(out, "; ")
}

// NodeReader reads a Kubernetes Node.
type NodeReader interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
}

// checkNode lets a satellite be registered only under the name of a Kubernetes Node, at one
// of that Node's InternalIP addresses, as the gate reads the Node itself.
func checkNode(ctx context.Context, nodes NodeReader, method, path string, reg *NodeRegistration) (*Refusal, error) {
	n, err := nodes.Get(ctx, reg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return refuse(method, path, ReasonNotAKubernetesNode, "name", "%s is not a Node of the cluster: the gate registers only a Kubernetes Node's satellite", reg.Name), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Node %s: %w", reg.Name, err)
	}
	want := net.ParseIP(reg.Address)
	var internal []string
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		internal = append(internal, a.Address)
		if ip := net.ParseIP(a.Address); want != nil && ip != nil && ip.Equal(want) {
			return nil, nil
		}
	}
	return refuse(method, path, ReasonNotTheNodesAddress, "net_interfaces[0].address",
		"Node %s's InternalIP is %q, not %s: the gate registers a satellite only at its Node's address", reg.Name, internal, reg.Address), nil
}
