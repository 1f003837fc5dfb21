package fleetsim

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Member is one simulated member cluster: its own endpoint, bearer token, objects and
// faults.
type Member struct {
	sim   *Sim
	name  string
	store *store
	// requests and readyz count the requests the member received, and the /readyz among them.
	requests, readyz atomic.Int64
	// gets counts the GETs the member received, by path.
	getsMu sync.Mutex
	gets   map[string]int64

	mu     sync.Mutex
	port   int
	server *http.Server
	token  string
	// issued are the other tokens of the hub the member accepts, by the name they are bound
	// to (IssueToken); admin is the token of its administrator, who may write (Admin).
	issued  map[string]string
	admin   string
	version string
	// thawed is nil unless the member is frozen; then it is closed by Thaw.
	thawed chan struct{}
	slow   time.Duration
	closed bool
	// reserved is the socket that holds the port while the member is stopped; -1 if none.
	reserved int

	// linkMu guards mended apart from mu: Stop closes connections under mu, and a
	// connection's close writes.
	linkMu sync.Mutex
	// mended is nil unless the member's link is cut; then it is closed by Mend.
	mended chan struct{}
	// conns are the member's open connections, which Cut has the kernel drop packets of.
	conns map[*linkConn]struct{}
}

var errNotFound = errors.New("not found")

// scheme encodes the typed objects Put is given.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := nwv1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

func newMember(s *Sim, name string) (*Member, error) {
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	admin, err := newToken()
	if err != nil {
		return nil, err
	}
	return &Member{sim: s, name: name, store: newStore(s.opts.History), token: token, admin: admin, issued: map[string]string{},
		version: s.opts.KubernetesVersion, reserved: -1}, nil
}

func mustToken() string {
	token, err := newToken()
	if err != nil {
		panic(fmt.Sprintf("reading random bytes: %v", err)) // crypto/rand does not fail on Linux
	}
	return token
}

func newToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Readyz counts the /readyz requests the member received so far, answered or not.
func (m *Member) Readyz() int64 { return m.readyz.Load() }

// Held is the size of the member's objects as stored (their JSON), in bytes: what a test
// that measures its own process's heap, the simulator in it, leaves out.
func (m *Member) Held() int64 {
	m.store.mu.Lock()
	defer m.store.mu.Unlock()
	return m.store.held
}

// Requests counts the requests the member received so far, answered or not.
func (m *Member) Requests() int64 { return m.requests.Load() }

// Gets counts the GETs of path (a list, a watch or a read, whatever its query) the member
// received so far, answered or not.
func (m *Member) Gets(path string) int64 {
	m.getsMu.Lock()
	defer m.getsMu.Unlock()
	return m.gets[path]
}

// Name is the member's name: m-0001, m-0002, ...
func (m *Member) Name() string { return m.name }

// Server is the member's API server URL.
func (m *Member) Server() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprintf("https://127.0.0.1:%d", m.port)
}

// Token is the bearer token the member accepts now.
func (m *Member) Token() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.token
}

// IssueToken returns a new token of the hub that the member accepts, as well as Token, until
// RevokeToken(boundTo): as a ServiceAccount token bound to an object is, until the object is
// deleted. A second token bound to the same name replaces the first.
func (m *Member) IssueToken(boundTo string) string {
	token := mustToken()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.issued[boundTo] = token
	return token
}

// RevokeToken makes the member refuse the token bound to the name (401). Watches already open
// go on, as on a kube-apiserver.
func (m *Member) RevokeToken(boundTo string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.issued, boundTo)
}

// Admin is a client configuration of the member's administrator, as a system:masters
// credential is: it may also write the kinds the member serves (create, update, patch,
// delete), as the member's operator and its users do. It sends JSON: the simulator reads no
// protobuf.
func (m *Member) Admin() *rest.Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", m.port), BearerToken: m.admin,
		TLSClientConfig: rest.TLSClientConfig{CAData: m.sim.CA()}, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}
}

// Kubeconfig is a kubeconfig for the member as the hub accepts one: the server, the CA
// inline and the token inline; no exec plugin, no file.
func (m *Member) Kubeconfig() ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[m.name] = &clientcmdapi.Cluster{Server: m.Server(), CertificateAuthorityData: m.sim.CA()}
	kc.AuthInfos[m.name] = &clientcmdapi.AuthInfo{Token: m.Token()}
	kc.Contexts[m.name] = &clientcmdapi.Context{Cluster: m.name, AuthInfo: m.name}
	kc.CurrentContext = m.name
	return clientcmd.Write(*kc)
}

// SetKubernetesVersion changes the gitVersion the member's /version answers, e.g. "v1.33.1".
func (m *Member) SetKubernetesVersion(v string) error {
	if _, _, err := parseGitVersion(v); err != nil {
		return fmt.Errorf("member %s: %w", m.name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.version = v
	return nil
}

// listen starts serving on the port, a random one when 0.
func (m *Member) listen(port int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed
	}
	if m.server != nil {
		return nil
	}
	if m.reserved >= 0 {
		_ = syscall.Close(m.reserved)
		m.reserved = -1
	}
	// No TCP keepalives from the member: over a cut link, its kernel would give up on a
	// connection after its probes went unanswered and send a reset, which the cut, a filter
	// of what arrives alone, would let through. The hub's keepalives are the ones tested.
	lc := net.ListenConfig{KeepAlive: -1}
	l, err := lc.Listen(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return fmt.Errorf("member %s: listening: %w", m.name, err)
	}
	m.port = l.Addr().(*net.TCPAddr).Port
	// One server per member, so that Stop closes this member's connections only. ServeTLS
	// turns HTTP/2 on, as a kube-apiserver has it.
	// Its log is dropped: a client that hangs up mid-handshake is a fault being played.
	srv := &http.Server{Handler: m, TLSConfig: m.sim.tls, ReadHeaderTimeout: time.Minute, ErrorLog: log.New(io.Discard, "", 0)}
	m.server = srv
	go func() { _ = srv.ServeTLS(&linkListener{Listener: l, m: m}, "", "") }()
	return nil
}

// Stop closes the member's listener and every open connection: new connections are
// refused until Resume.
func (m *Member) Stop() {
	m.Mend() // a connection's close writes TLS's close_notify, which a cut link would hold
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.server == nil {
		return
	}
	_ = m.server.Close()
	m.server = nil
	if !m.closed {
		// Best effort: without it the port may be taken before Resume, which then fails.
		if fd, err := reservePort(m.port); err == nil {
			m.reserved = fd
		}
	}
}

// Resume listens again on the member's port.
func (m *Member) Resume() error {
	m.mu.Lock()
	port := m.port
	m.mu.Unlock()
	return m.listen(port)
}

func (m *Member) close() {
	m.Thaw()
	m.Mend()
	m.mu.Lock()
	m.closed = true
	if m.reserved >= 0 {
		_ = syscall.Close(m.reserved)
		m.reserved = -1
	}
	m.mu.Unlock()
	m.Stop()
}

// Freeze makes the member accept connections and requests but answer none: new requests
// hang and open watches deliver nothing, until Thaw.
func (m *Member) Freeze() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.thawed == nil {
		m.thawed = make(chan struct{})
	}
}

// Thaw undoes Freeze: the held requests are answered and the held events delivered.
func (m *Member) Thaw() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.thawed != nil {
		close(m.thawed)
		m.thawed = nil
	}
}

// Cut plays a link that drops every packet: each of the member's connections, and those it
// accepts, send nothing and deliver nothing (HTTP/2 PINGs go unanswered too), until Mend,
// when what was held goes through, as TCP's retransmissions would deliver it. The kernel
// plays the link too: a socket filter on each connection drops every packet that arrives
// on it before TCP sees it, so that nothing is acknowledged, a TCP keepalive's probe no
// more than data, and the hub's kernel finds the peer silent as over a cut link. A new
// connection completes its TCP handshake (the listener takes no filter) but nothing after.
// Freeze, by contrast, plays an API server that hangs behind a link that works.
func (m *Member) Cut() {
	m.linkMu.Lock()
	defer m.linkMu.Unlock()
	if m.mended == nil {
		m.mended = make(chan struct{})
		for c := range m.conns {
			c.cut()
		}
	}
}

// Mend undoes Cut.
func (m *Member) Mend() {
	m.linkMu.Lock()
	defer m.linkMu.Unlock()
	if m.mended != nil {
		close(m.mended)
		m.mended = nil
		for c := range m.conns {
			c.mend()
		}
	}
}

// waitLinked waits while the member's link is cut.
func (m *Member) waitLinked() {
	m.linkMu.Lock()
	mended := m.mended
	m.linkMu.Unlock()
	if mended != nil {
		<-mended
	}
}

// linkListener accepts the member's connections as linkConns.
type linkListener struct {
	net.Listener
	m *Member
}

func (l *linkListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := &linkConn{Conn: c, m: l.m}
	m := l.m
	m.linkMu.Lock()
	defer m.linkMu.Unlock()
	if m.conns == nil {
		m.conns = map[*linkConn]struct{}{}
	}
	m.conns[lc] = struct{}{}
	if m.mended != nil {
		lc.cut()
	}
	return lc, nil
}

// linkConn holds what it reads and what it writes while the member's link is cut, and has
// the kernel drop what arrives on it then (drop).
type linkConn struct {
	net.Conn
	m *Member
}

// dropAll is a classic BPF program that keeps no byte of any packet: attached to a socket
// (SO_ATTACH_FILTER), the kernel drops each packet that arrives on it before TCP sees it.
var dropAll = []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}

// drop attaches dropAll to the connection's socket, or detaches it. A process may filter
// its own sockets without privilege. A connection closed meanwhile has nothing to filter.
func (c *linkConn) drop(on bool) error {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return fmt.Errorf("a %T has no socket to filter", c.Conn)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		if on {
			serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(dropAll)), Filter: &dropAll[0]})
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DETACH_FILTER, 0)
		}
	})
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return cmp.Or(err, serr)
}

// cut has the kernel drop what arrives on the connection; a connection it cannot filter so is
// closed (the hub then finds it lost at once rather than by its keepalives).
func (c *linkConn) cut() {
	if err := c.drop(true); err != nil {
		_ = c.Conn.Close()
	}
}

// mend lets what arrives on the connection through again; a connection the filter cannot be
// taken from is closed.
func (c *linkConn) mend() {
	if err := c.drop(false); err != nil {
		_ = c.Conn.Close()
	}
}

func (c *linkConn) Close() error {
	c.m.linkMu.Lock()
	delete(c.m.conns, c)
	c.m.linkMu.Unlock()
	return c.Conn.Close()
}

func (c *linkConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.m.waitLinked()
	return n, err
}

func (c *linkConn) Write(p []byte) (int, error) {
	c.m.waitLinked()
	return c.Conn.Write(p)
}

// Slow delays every answer by d; 0 undoes it. Events of watches already open are not
// delayed.
func (m *Member) Slow(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.slow = max(d, 0)
}

// Revoke makes the member refuse its current token (401) and returns the new token it
// accepts. Watches already open go on, as on a kube-apiserver, which authenticates a request
// when it starts.
func (m *Member) Revoke() string {
	token := mustToken()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.token = token
	return token
}

// waitThawed waits while the member is frozen; false if ctx ended first.
func (m *Member) waitThawed(ctx context.Context) bool {
	m.mu.Lock()
	thawed := m.thawed
	m.mu.Unlock()
	if thawed == nil {
		return true
	}
	select {
	case <-thawed:
		return true
	case <-ctx.Done():
		return false
	}
}

// Put creates the object or replaces it, as a write to the member's API server would:
// the member's resourceVersion is bumped and watches see ADDED or MODIFIED. A new object gets
// a UID and a creation time; a replaced one keeps them, and its generation, unless obj
// sets them. obj's kind must be one the member serves.
func (m *Member) Put(obj client.Object) error {
	obj = obj.DeepCopyObject().(client.Object) // the caller's object is not changed
	res, err := m.resourceOf(obj)
	if err != nil {
		return err
	}
	if err := checkScope(res, obj); err != nil {
		return fmt.Errorf("member %s: %w", m.name, err)
	}
	return m.store.write(res, obj.GetNamespace(), obj.GetName(), false, func(rv uint64, prev *object) (*object, error) {
		if prev != nil {
			var old metav1.PartialObjectMetadata
			if err := json.Unmarshal(prev.json, &old); err != nil {
				return nil, err
			}
			if obj.GetUID() == "" {
				obj.SetUID(old.UID)
			}
			if created := obj.GetCreationTimestamp(); created.IsZero() {
				obj.SetCreationTimestamp(old.CreationTimestamp)
			}
			if obj.GetGeneration() == 0 {
				obj.SetGeneration(old.Generation)
			}
		}
		if obj.GetUID() == "" {
			obj.SetUID(uuid.NewUUID())
		}
		if created := obj.GetCreationTimestamp(); created.IsZero() {
			obj.SetCreationTimestamp(metav1.Now().Rfc3339Copy())
		}
		if obj.GetGeneration() == 0 && !res.noGeneration {
			obj.SetGeneration(1)
		}
		obj.SetResourceVersion(fmt.Sprint(rv))
		obj.SetManagedFields(nil)
		data, err := json.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("member %s: encoding %s %q: %w", m.name, res.kind, obj.GetName(), err)
		}
		return &object{res: res, ns: obj.GetNamespace(), name: obj.GetName(), labels: obj.GetLabels(), rv: rv, json: data}, nil
	})
}

// Remove deletes the object of obj's kind, namespace and name: watches see DELETED.
func (m *Member) Remove(obj client.Object) error {
	res, err := m.resourceOf(obj)
	if err != nil {
		return err
	}
	return m.store.write(res, obj.GetNamespace(), obj.GetName(), true, func(rv uint64, prev *object) (*object, error) {
		data, err := withVersion(prev.json, rv)
		if err != nil {
			return nil, fmt.Errorf("member %s: %w", m.name, err)
		}
		return &object{res: res, ns: prev.ns, name: prev.name, labels: prev.labels, rv: rv, json: data}, nil
	})
}

// UpdateCluster changes the NodewrightCluster "nodewright" with fn, as its status writer
// would: its resourceVersion is bumped and watches see MODIFIED.
func (m *Member) UpdateCluster(fn func(*nwv1.NodewrightCluster)) error {
	res := resourceOfKind(nwv1.GroupVersion.WithKind("NodewrightCluster"))
	o := m.store.get(res, "", clusterName)
	if o == nil {
		return fmt.Errorf("member %s: the NodewrightCluster %q: %w", m.name, clusterName, errNotFound)
	}
	var nwc nwv1.NodewrightCluster
	if err := json.Unmarshal(o.json, &nwc); err != nil {
		return fmt.Errorf("member %s: decoding the NodewrightCluster: %w", m.name, err)
	}
	fn(&nwc)
	nwc.Name, nwc.Namespace = clusterName, ""
	return m.Put(&nwc)
}

// resourceOf is the served resource of obj's kind, which it also sets on obj.
func (m *Member) resourceOf(obj client.Object) (*resource, error) {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", m.name, err)
	}
	res := resourceOfKind(gvk)
	if res == nil {
		return nil, fmt.Errorf("member %s: %s is not a kind the simulator serves", m.name, gvk)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return res, nil
}

func checkScope(res *resource, obj client.Object) error {
	switch {
	case obj.GetName() == "":
		return fmt.Errorf("%s: metadata.name is required", res.kind)
	case res.namespaced && obj.GetNamespace() == "":
		return fmt.Errorf("%s %q: metadata.namespace is required: the kind is namespaced", res.kind, obj.GetName())
	case !res.namespaced && obj.GetNamespace() != "":
		return fmt.Errorf("%s %q: metadata.namespace must be empty: the kind is cluster-scoped", res.kind, obj.GetName())
	}
	return nil
}
