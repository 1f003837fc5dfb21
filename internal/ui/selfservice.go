package ui

import (
	"net/http"
	"strings"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// The kinds of the namespace view: a VM owner's VMs, the operations asked for on them, and
// their snapshots, all in the page's one namespace (the VMVolumeMigrations come from the
// migrations' own watch). A VM owner with the edit role may read nothing else, and the view
// shows nothing else: of the cluster, its phase, when the user may read it.
const (
	kindVM         = "VirtualMachine"
	kindVMOp       = "VMOperationRequest"
	kindVMSnapshot = "VirtualMachineSnapshot"
)

// kubevirtKinds are served by KubeVirt, not by Nodewright: a cluster without them lacks KubeVirt.
var kubevirtKinds = map[string]bool{kindVM: true, kindVMSnapshot: true}

// namespaceSources are the watches of the namespace view, in namespace ns.
func namespaceSources(ns string) []source {
	return []source{
		{kind: kindVM, namespace: ns, newList: func() client.ObjectList { return &virtv1.VirtualMachineList{} },
			example: &virtv1.VirtualMachine{}, encode: encodeVM},
		{kind: kindVMOp, namespace: ns, newList: func() client.ObjectList { return &nwv1.VMOperationRequestList{} },
			example: &nwv1.VMOperationRequest{}},
		{kind: kindVMSnapshot, namespace: ns, newList: func() client.ObjectList { return &snapv1.VirtualMachineSnapshotList{} },
			example: &snapv1.VirtualMachineSnapshot{}, encode: encodeVMSnapshot},
	}
}

// shownMeta is what the page needs of an object's metadata.
type shownMeta struct {
	Namespace         string      `json:"namespace"`
	Name              string      `json:"name"`
	UID               string      `json:"uid"`
	CreationTimestamp metav1.Time `json:"creationTimestamp"`
}

func metaOf(o client.Object) shownMeta {
	return shownMeta{Namespace: o.GetNamespace(), Name: o.GetName(), UID: string(o.GetUID()), CreationTimestamp: o.GetCreationTimestamp()}
}

// shownVM is what the namespace view shows of a VirtualMachine: whether it runs, and its
// volumes' names, for the form that moves one. The rest of its spec (disks, networks,
// cloud-init and its secrets' names, the claims' names) stays on the server.
type shownVM struct {
	Metadata shownMeta `json:"metadata"`
	// PrintableStatus is KubeVirt's word for the VM's state (Running, Stopped, Starting…).
	PrintableStatus string        `json:"printableStatus,omitempty"`
	Ready           bool          `json:"ready"`
	RunStrategy     string        `json:"runStrategy,omitempty"`
	Volumes         []shownVolume `json:"volumes,omitempty"`
}

// shownVolume is one volume of a VM's template: its name, and whether it is on a claim (a
// PersistentVolumeClaim or a DataVolume), the only kind a MigrateVolume can move.
type shownVolume struct {
	Name  string `json:"name"`
	Claim bool   `json:"claim"`
}

func encodeVM(o client.Object) any {
	vm := o.(*virtv1.VirtualMachine)
	shown := shownVM{Metadata: metaOf(vm), PrintableStatus: string(vm.Status.PrintableStatus), Ready: vm.Status.Ready}
	switch {
	case vm.Spec.RunStrategy != nil:
		shown.RunStrategy = string(*vm.Spec.RunStrategy)
	case vm.Spec.Running != nil && *vm.Spec.Running: // deprecated, and still said by older VMs
		shown.RunStrategy = string(virtv1.RunStrategyAlways)
	case vm.Spec.Running != nil:
		shown.RunStrategy = string(virtv1.RunStrategyHalted)
	}
	if vm.Spec.Template != nil {
		for _, v := range vm.Spec.Template.Spec.Volumes {
			shown.Volumes = append(shown.Volumes, shownVolume{Name: v.Name, Claim: v.PersistentVolumeClaim != nil || v.DataVolume != nil})
		}
	}
	return shown
}

// shownVMSnapshot is what the namespace view shows of a VirtualMachineSnapshot.
type shownVMSnapshot struct {
	Metadata     shownMeta  `json:"metadata"`
	VM           string     `json:"vm"`
	Phase        string     `json:"phase,omitempty"`
	ReadyToUse   bool       `json:"readyToUse"`
	CreationTime *time.Time `json:"creationTime,omitempty"`
	Error        string     `json:"error,omitempty"`
	Indications  []string   `json:"indications,omitempty"`
}

func encodeVMSnapshot(o client.Object) any {
	s := o.(*snapv1.VirtualMachineSnapshot)
	shown := shownVMSnapshot{Metadata: metaOf(s), VM: s.Spec.Source.Name}
	if st := s.Status; st != nil {
		shown.Phase = string(st.Phase)
		shown.ReadyToUse = st.ReadyToUse != nil && *st.ReadyToUse
		if st.CreationTime != nil {
			shown.CreationTime = &st.CreationTime.Time
		}
		if st.Error != nil && st.Error.Message != nil {
			shown.Error = *st.Error.Message
		}
		for _, i := range st.Indications {
			shown.Indications = append(shown.Indications, string(i))
		}
	}
	return shown
}

// vmOperationForm is one of the namespace view's forms: an operation on one VM.
type vmOperationForm struct {
	Namespace string `json:"namespace"`
	Operation string `json:"operation"`
	VM        string `json:"vm"`
	Snapshot  string `json:"snapshot"`
	// Volume and StorageClass are a MigrateVolume's: the VM's volume, and where to move it.
	Volume       string `json:"volume"`
	StorageClass string `json:"storageClass"`
	Reason       string `json:"reason"`
}

// createVMOperation creates a VMOperationRequest as the user: RBAC says whether they may, the
// schema and the admission webhook judge the rest and stamp who asked. A refusal goes back to
// the form in the API server's words.
func (s *server) createVMOperation(w http.ResponseWriter, r *http.Request) {
	var req vmOperationForm
	ns, ok := s.readForm(w, r, 16<<10, &req, &req.Namespace)
	if !ok {
		return
	}
	op := &nwv1.VMOperationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns},
		Spec: nwv1.VMOperationRequestSpec{
			Operation: nwv1.VMOperation(strings.TrimSpace(req.Operation)),
			VM:        strings.TrimSpace(req.VM),
			Params: nwv1.VMOperationParams{
				Snapshot:     strings.TrimSpace(req.Snapshot),
				Volume:       strings.TrimSpace(req.Volume),
				StorageClass: strings.TrimSpace(req.StorageClass),
			},
			Reason: strings.TrimSpace(req.Reason),
		},
	}
	op.GenerateName = generateName(op.Spec.VM, strings.ToLower(string(op.Spec.Operation)))
	ctx, warnings := collectWarnings(r.Context())
	if err := s.client.Create(ctx, op); err != nil {
		writeJSON(w, statusOf(err), actionResult{Errors: refusal(err), Warnings: warnings.list()})
		return
	}
	writeJSON(w, http.StatusCreated, actionResult{Namespace: op.Namespace, Name: op.Name, Warnings: warnings.list()})
}

// storageClassList answers the namespace view's storageClasses: the StorageClasses the user
// may list, as suggestions for the form that moves a volume. A VM owner usually may not list
// them, and that is no error: the page then offers none and takes the name as typed.
type storageClassList struct {
	Listable       bool          `json:"listable"`
	StorageClasses []classChoice `json:"storageClasses"`
}

// storageClasses lists the StorageClasses as the user.
func (s *server) storageClasses(w http.ResponseWriter, r *http.Request) {
	var classes storagev1.StorageClassList
	if err := s.client.List(r.Context(), &classes); err != nil {
		if apierrors.IsForbidden(err) {
			writeJSON(w, http.StatusOK, storageClassList{StorageClasses: []classChoice{}})
			return
		}
		writeJSON(w, statusOf(err), actionResult{Errors: refusal(err)})
		return
	}
	out := storageClassList{Listable: true, StorageClasses: []classChoice{}}
	for _, c := range classes.Items {
		out.StorageClasses = append(out.StorageClasses, classChoice{Name: c.Name, Provisioner: c.Provisioner})
	}
	writeJSON(w, http.StatusOK, out)
}
