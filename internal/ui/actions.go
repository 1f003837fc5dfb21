package ui

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/cli"
)

// migrationRequest is the page's form.
type migrationRequest struct {
	Namespace        string `json:"namespace"`
	Name             string `json:"name"`
	VMName           string `json:"vmName"`
	VolumeName       string `json:"volumeName"`
	StorageClassName string `json:"storageClassName"`
	Hot              bool   `json:"hot"`
}

// fieldError is a refusal about one field of the form ("" for the form as a whole).
type fieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// actionResult answers the page's create or delete.
type actionResult struct {
	Namespace string       `json:"namespace,omitempty"`
	Name      string       `json:"name,omitempty"`
	Warnings  []string     `json:"warnings,omitempty"`
	Errors    []fieldError `json:"errors,omitempty"`
}

// createMigration creates a VMVolumeMigration as the user: the API server checks the schema,
// the admission webhooks check the rest and stamp who asked. A refusal goes back to the form
// field by field.
func (s *server) createMigration(w http.ResponseWriter, r *http.Request) {
	var req migrationRequest
	ns, ok := s.readForm(w, r, 64<<10, &req, &req.Namespace)
	if !ok {
		return
	}
	mode := nwv1.MigrationCold
	if req.Hot {
		mode = nwv1.MigrationHot
	}
	m := &nwv1.VMVolumeMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: strings.TrimSpace(req.Name)},
		Spec: nwv1.VMVolumeMigrationSpec{
			VMName: strings.TrimSpace(req.VMName), VolumeName: strings.TrimSpace(req.VolumeName), Mode: mode,
			Target: nwv1.MigrationTarget{StorageClassName: strings.TrimSpace(req.StorageClassName)},
		},
	}
	if m.Name == "" {
		m.GenerateName = generateName(m.Spec.VMName, m.Spec.VolumeName)
	}
	ctx, warnings := collectWarnings(r.Context())
	if err := s.client.Create(ctx, m); err != nil {
		writeJSON(w, statusOf(err), actionResult{Errors: refusal(err), Warnings: warnings.list()})
		return
	}
	writeJSON(w, http.StatusCreated, actionResult{Namespace: m.Namespace, Name: m.Name, Warnings: warnings.list()})
}

// readForm reads the page's form, of at most limit bytes, into form, and returns the namespace
// of the object it asks for: the one the UI is bound to, else the form's namespace, which
// points into form. A form that cannot be read, or names no namespace, is answered here, and
// ok is false.
func (s *server) readForm(w http.ResponseWriter, r *http.Request, limit int64, form any, namespace *string) (ns string, ok bool) {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit)).Decode(form); err != nil {
		writeJSON(w, http.StatusBadRequest, actionResult{Errors: []fieldError{{Message: "the form could not be read: " + err.Error()}}})
		return "", false
	}
	ns = strings.TrimSpace(*namespace)
	if s.opts.Namespace != "" {
		ns = s.opts.Namespace
	}
	if ns == "" {
		writeJSON(w, http.StatusUnprocessableEntity, actionResult{Errors: []fieldError{{Field: "metadata.namespace", Message: "metadata.namespace: name the namespace of the VM"}}})
		return "", false
	}
	return ns, true
}

// deleteMigration cancels a migration by deleting it, as the user; with ?uid= only that
// object, not one created since under the same name.
func (s *server) deleteMigration(w http.ResponseWriter, r *http.Request) {
	m := &nwv1.VMVolumeMigration{ObjectMeta: metav1.ObjectMeta{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}}
	var opts []client.DeleteOption
	if uid := r.URL.Query().Get("uid"); uid != "" {
		u := types.UID(uid)
		opts = append(opts, client.Preconditions{UID: &u})
	}
	ctx, warnings := collectWarnings(r.Context())
	if err := s.client.Delete(ctx, m, opts...); err != nil {
		writeJSON(w, statusOf(err), actionResult{Errors: refusal(err), Warnings: warnings.list()})
		return
	}
	writeJSON(w, http.StatusAccepted, actionResult{Namespace: m.Namespace, Name: m.Name, Warnings: warnings.list()})
}

// approveRequest is the page's Approve button: the step the page showed waiting.
type approveRequest struct {
	Step string `json:"step"`
}

// approveResult answers an approval: what it did, in the words approve prints.
type approveResult struct {
	Name     string       `json:"name"`
	Lines    []string     `json:"lines,omitempty"`
	Warnings []string     `json:"warnings,omitempty"`
	Errors   []fieldError `json:"errors,omitempty"`
}

// approve is the handler that approves, as the user, the step the page showed a Manual
// workflow of kind (bondmodeflipplan, replicationupgrade) waiting on, with the code of
// `kubectl nodewright approve` (cli.Approve): the approve annotation set with the
// resourceVersion read, the step checked again; the admission webhook stamps the user as the
// approver. A refusal (the step no longer waits, the user may not update the workflow, the
// webhook) goes back to the page in those words.
func (s *server) approve(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		var req approveRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10)).Decode(&req); err != nil || req.Step == "" {
			writeJSON(w, http.StatusBadRequest, approveResult{Name: name, Errors: []fieldError{{Message: "the request names no step to approve"}}})
			return
		}
		ctx, warnings := collectWarnings(r.Context())
		done, err := cli.Approve(ctx, s.client, kind, name, req.Step)
		if err != nil {
			status := statusOf(err)
			if status == http.StatusBadGateway {
				status = http.StatusConflict // the workflow is not where the page showed it
			}
			writeJSON(w, status, approveResult{Name: name, Errors: []fieldError{{Message: err.Error()}}, Warnings: warnings.list()})
			return
		}
		writeJSON(w, http.StatusOK, approveResult{Name: name, Lines: done.Lines(), Warnings: warnings.list()})
	}
}

// generateName is a prefix the API server completes: vm-volume-xxxxx.
func generateName(vm, volume string) string {
	prefix := strings.Trim(vm+"-"+volume, "-")
	if len(prefix) > 40 {
		prefix = prefix[:40]
	}
	if prefix == "" {
		prefix = "migration"
	}
	return strings.TrimRight(prefix, "-.") + "-"
}

func statusOf(err error) int {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code >= 400 {
		return int(status.Status().Code)
	}
	return http.StatusBadGateway
}

// deniedMarker precedes an admission webhook's own words in the API server's message.
const deniedMarker = "denied the request: "

// fieldPrefix is the field path a refusal starts with, as the webhooks and the schema write it.
var fieldPrefix = regexp.MustCompile(`^((?:spec|metadata)(?:\.[A-Za-z][A-Za-z0-9]*)+(?:\[[^\]]*\])?(?:\.[A-Za-z][A-Za-z0-9]*)*): `)

// refusal turns the API server's answer into errors per form field: the schema's causes, each
// with its field, or the admission webhook's text after "denied the request: ", which starts
// with the field it is about.
func refusal(err error) []fieldError {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return []fieldError{{Message: err.Error()}}
	}
	st := status.Status()
	if _, text, ok := strings.Cut(st.Message, deniedMarker); ok {
		return []fieldError{{Field: fieldOf(text), Message: text}}
	}
	var out []fieldError
	if st.Reason == metav1.StatusReasonInvalid && st.Details != nil {
		for _, c := range st.Details.Causes {
			msg := c.Message
			if c.Field != "" && !strings.HasPrefix(msg, c.Field) {
				msg = c.Field + ": " + msg
			}
			out = append(out, fieldError{Field: c.Field, Message: msg})
		}
	}
	if len(out) == 0 {
		out = []fieldError{{Field: fieldOf(st.Message), Message: st.Message}}
	}
	return out
}

func fieldOf(text string) string {
	if m := fieldPrefix.FindStringSubmatch(text); m != nil {
		return m[1]
	}
	return ""
}

// warningsKey finds a request's warning collector in its context.
type warningsKey struct{}

type warningList struct {
	mu   sync.Mutex
	text []string
}

func (l *warningList) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.text)
}

func collectWarnings(ctx context.Context) (context.Context, *warningList) {
	l := &warningList{}
	return context.WithValue(ctx, warningsKey{}, l), l
}

// warningHandler hands the API server's warnings (the admission webhooks' among them) to the
// request that caused them.
type warningHandler struct{}

func (warningHandler) HandleWarningHeaderWithContext(ctx context.Context, _ int, _ string, text string) {
	if l, ok := ctx.Value(warningsKey{}).(*warningList); ok {
		l.mu.Lock()
		l.text = append(l.text, text)
		l.mu.Unlock()
	}
}

// vmChoice is a VM the form offers, with the volumes a migration can move.
type vmChoice struct {
	Name    string   `json:"name"`
	Volumes []string `json:"volumes"`
}

type classChoice struct {
	Name        string `json:"name"`
	Provisioner string `json:"provisioner"`
}

type choices struct {
	VMs            []vmChoice    `json:"vms"`
	StorageClasses []classChoice `json:"storageClasses"`
	Problems       []string      `json:"problems,omitempty"`
}

// choices lists, once when the form opens, the VMs of a namespace and the StorageClasses, as
// suggestions: the form accepts any text, and the webhooks judge it.
func (s *server) choices(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("namespace")
	if s.opts.Namespace != "" {
		ns = s.opts.Namespace
	}
	out := choices{VMs: []vmChoice{}, StorageClasses: []classChoice{}}
	if ns != "" {
		var vms virtv1.VirtualMachineList
		if err := s.client.List(r.Context(), &vms, client.InNamespace(ns)); err != nil {
			out.Problems = append(out.Problems, "VirtualMachines: "+err.Error())
		}
		for _, vm := range vms.Items {
			c := vmChoice{Name: vm.Name, Volumes: []string{}}
			if vm.Spec.Template != nil {
				for _, v := range vm.Spec.Template.Spec.Volumes {
					if v.PersistentVolumeClaim != nil || v.DataVolume != nil {
						c.Volumes = append(c.Volumes, v.Name)
					}
				}
			}
			out.VMs = append(out.VMs, c)
		}
	}
	var classes storagev1.StorageClassList
	if err := s.client.List(r.Context(), &classes); err != nil {
		out.Problems = append(out.Problems, "StorageClasses: "+err.Error())
	}
	for _, c := range classes.Items {
		out.StorageClasses = append(out.StorageClasses, classChoice{Name: c.Name, Provisioner: c.Provisioner})
	}
	writeJSON(w, http.StatusOK, out)
}
