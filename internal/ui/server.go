package ui

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

//go:embed assets
var assets embed.FS

// indexPage is the page: static, with no secret in it. Its script takes the token from the
// URL's fragment.
var indexPage = func() []byte {
	b, err := assets.ReadFile("assets/index.html")
	if err != nil {
		panic(err)
	}
	return b
}()

// server is the UI's handler. Its client acts as the user.
type server struct {
	opts   Options
	client client.WithWatch
	hub    *hub
	trail  *trail
	mux    *http.ServeMux

	userMu sync.Mutex
	user   string
}

func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, nwv1.AddToScheme, fleetv1alpha1.AddToScheme, virtv1.AddToScheme, snapv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

func newServer(cfg *rest.Config, opts Options) (*server, error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandlerWithContext = warningHandler{}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("building a client from the kubeconfig: %w", err)
	}
	tr, err := newTrail(opts.TrailDir, opts.TrailKeys)
	if err != nil {
		return nil, err
	}
	s := &server{opts: opts, client: c, trail: tr, mux: http.NewServeMux()}
	s.hub = newHub(c, opts.Namespace, tr, opts.Log)
	s.hub.fleet = opts.Fleet
	// The namespace view's: the namespace of -n, or the kubeconfig context's.
	s.hub.viewNamespace = opts.DefaultNamespace
	if s.hub.progress, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("building a client from the kubeconfig: %w", err)
	}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	s.mux.HandleFunc("GET /{$}", s.index)
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /api/events", s.events)
	s.mux.HandleFunc("GET /api/trail", s.trailRecords)
	if opts.Fleet {
		// The fleet page only reads: the hub never acts on a member, and the page has no
		// action to take on the hub either.
		return s, nil
	}
	s.mux.HandleFunc("GET /api/choices", s.choices)
	s.mux.HandleFunc("POST /api/migrations", s.createMigration)
	s.mux.HandleFunc("DELETE /api/migrations/{namespace}/{name}", s.deleteMigration)
	s.mux.HandleFunc("POST /api/flips/{name}/approve", s.approve("bondmodeflipplan"))
	s.mux.HandleFunc("POST /api/upgrades/{name}/approve", s.approve("replicationupgrade"))
	s.mux.HandleFunc("POST /api/ospolicies/{name}/approve", s.approve("osversionpolicy"))
	s.mux.HandleFunc("POST /api/vmoperationrequests", s.createVMOperation)
	s.mux.HandleFunc("GET /api/storageclasses", s.storageClasses)
	return s, nil
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.guard(s.mux).ServeHTTP(w, r)
}

// index is the page. What it shows comes through the API, with the token.
func (s *server) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(indexPage)
}

// whoAmI is the user the API server authenticates the kubeconfig as, asked until it answers.
func (s *server) whoAmI(ctx context.Context) string {
	s.userMu.Lock()
	defer s.userMu.Unlock()
	if s.user == "" {
		review := &authenticationv1.SelfSubjectReview{}
		if err := s.client.Create(ctx, review); err == nil {
			s.user = review.Status.UserInfo.Username
		}
	}
	return s.user
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
