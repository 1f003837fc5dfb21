package fleetsim

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

const namespace = "nodewright-system"

// side is one of the two API servers compared: the real one or a simulated member.
type side struct {
	name   string
	cfg    *rest.Config
	client client.WithWatch
	// put and remove write as the member's operator would.
	put    func(client.Object) error
	remove func(client.Object) error
}

// startReal starts a kube-apiserver with the Nodewright CRDs.
func startReal(t *testing.T) *rest.Config {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	assets, err := testenv.BinaryAssets(root)
	if err != nil {
		t.Fatal(err)
	}
	// Fresh ports on each try: TestThousandsOfMembers, beside it, listens on thousands of
	// ports and connects to each, and one can take the port picked for etcd before etcd
	// binds it.
	env, cfg, err := testenv.StartEnvironment(func() *envtest.Environment {
		return &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}, ErrorIfCRDPathMissing: true,
			BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: 3 * time.Minute}
	})
	if err != nil {
		t.Fatalf("starting the kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	return cfg
}

func newSide(t *testing.T, name string, cfg *rest.Config) *side {
	t.Helper()
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &side{name: name, cfg: cfg, client: c}
}

// createWithStatus creates the object on the real API server, then writes its status, as
// the operator does.
func createWithStatus(ctx context.Context, c client.Client, obj client.Object) error {
	withStatus := obj.DeepCopyObject().(client.Object)
	if err := c.Create(ctx, obj); err != nil {
		return err
	}
	switch withStatus.(type) {
	case *corev1.ConfigMap, *appsv1.Deployment: // no status the member's operator writes
		return nil
	}
	withStatus.SetResourceVersion(obj.GetResourceVersion())
	return c.Status().Update(ctx, withStatus)
}

// normalized is the object without what the two servers set differently by design: the
// resourceVersion, UID, creation time and managed fields.
func normalized(obj client.Object) client.Object {
	o := obj.DeepCopyObject().(client.Object)
	o.SetResourceVersion("")
	o.SetUID("")
	o.SetCreationTimestamp(metav1.Time{})
	o.SetManagedFields(nil)
	return o
}

// sides starts a real API server and a simulated member holding the same objects.
func sides(t *testing.T) (real, sim *side, member *Member) {
	t.Helper()
	ctx := context.Background()
	real = newSide(t, "real", startReal(t))
	// A short history: the seeding alone overflows it, so a watch from version 1 is too old
	// here as on the real server, whatever the parallel subtests write.
	s := startSim(t, Options{Members: 1, History: 8, BookmarkInterval: time.Hour})
	member = s.Members()[0]
	sim = newSide(t, "sim", memberConfig(s, member, member.Token()))
	sim.put, sim.remove = member.Put, member.Remove
	real.put = func(obj client.Object) error {
		o := obj.DeepCopyObject().(client.Object)
		existing := o.DeepCopyObject().(client.Object)
		if err := real.client.Get(ctx, client.ObjectKeyFromObject(o), existing); apierrors.IsNotFound(err) {
			return createWithStatus(ctx, real.client, o)
		} else if err != nil {
			return err
		}
		// The tests change ConfigMaps' data and other objects' status only.
		o.SetResourceVersion(existing.GetResourceVersion())
		if _, ok := o.(*corev1.ConfigMap); ok {
			return real.client.Update(ctx, o)
		}
		return real.client.Status().Update(ctx, o)
	}
	real.remove = func(obj client.Object) error { return real.client.Delete(ctx, obj) }
	if err := real.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := sim.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: checkpointConfigMap}, &cm); err != nil {
		t.Fatalf("reading the simulator's checkpoint: %v", err)
	}
	// The same objects on both: written to the real server, read back with its defaults,
	// and put to the simulator as read.
	for _, obj := range SeedObjects(namespace, cm.Data[checkpointKey], 3, 5) {
		if err := createWithStatus(ctx, real.client, obj); err != nil {
			t.Fatalf("seeding the real server with %T %s: %v", obj, obj.GetName(), err)
		}
		if err := real.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		if err := member.Put(normalized(obj)); err != nil {
			t.Fatal(err)
		}
	}
	return real, sim, member
}

// administratorWrites makes the writes a member's administrator (its operator, a test) makes
// and says what each came to: the objects as stored (normalized) and the errors' reasons.
func administratorWrites(ctx context.Context, t *testing.T, c client.Client) []any {
	t.Helper()
	var out []any
	stored := func(name string) {
		t.Helper()
		var f nwv1.BondModeFlipPlan
		err := c.Get(ctx, client.ObjectKey{Name: name}, &f)
		if err != nil {
			out = append(out, apierrors.ReasonForError(err))
			return
		}
		f.TypeMeta = metav1.TypeMeta{}
		out = append(out, normalized(&f))
	}
	reason := func(err error) { out = append(out, string(apierrors.ReasonForError(err))) }
	plan := func() *nwv1.BondModeFlipPlan {
		return &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "written", Labels: map[string]string{"a": "1"}},
			// What the real server defaults, given: the simulator does not default.
			Spec: nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondMode8023AD, NodeOrder: []string{"node-1"}, VMProtection: nwv1.VMProtectionLiveMigrate,
				ConnectivityTimeout: metav1.Duration{Duration: time.Minute}, Approval: "Automatic"},
			Status: nwv1.BondModeFlipPlanStatus{WorkflowStatus: nwv1.WorkflowStatus{Phase: nwv1.WorkflowRunning}}}
	}
	// A create drops the status; a second create is refused.
	f := plan()
	reason(c.Create(ctx, f))
	stored("written")
	reason(c.Create(ctx, plan()))
	// An update from a stale version is refused; one from the stored version changes the spec
	// (the generation with it) and not the status.
	stale := plan()
	stale.ResourceVersion = "1"
	reason(c.Update(ctx, stale))
	f.Spec.NodeOrder = []string{"node-1", "node-2"}
	f.Status.Phase = nwv1.WorkflowFailed
	reason(c.Update(ctx, f))
	stored("written")
	// The status alone: the generation stays.
	f.Status.Phase = nwv1.WorkflowSucceeded
	f.Spec.NodeOrder = []string{"node-3"}
	reason(c.Status().Update(ctx, f))
	stored("written")
	// An update naming no resourceVersion is refused, a custom resource's; one that changes
	// nothing keeps the resourceVersion.
	reason(c.Update(ctx, plan()))
	var now nwv1.BondModeFlipPlan
	if err := c.Get(ctx, client.ObjectKey{Name: "written"}, &now); err != nil {
		t.Fatal(err)
	}
	again := now.DeepCopy()
	reason(c.Update(ctx, again))
	out = append(out, again.ResourceVersion == now.ResourceVersion)
	// A merge patch from a stale version is refused.
	reason(c.Patch(ctx, &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "written"}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"resourceVersion":"1","labels":{"c":"3"}}}`))))
	// Merge patches of the object and of its status; a label alone keeps the generation.
	reason(c.Patch(ctx, &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "written"}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"a":null,"b":"2"}}}`))))
	reason(c.Status().Patch(ctx, &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "written"}},
		client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Failed"}}`))))
	stored("written")
	reason(c.Patch(ctx, &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "absent"}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"b":"2"}}}`))))
	// A server-side apply creates an object that is missing.
	applied := []byte(`{"apiVersion":"nodewright.spectrocloud.com/v1alpha1","kind":"BondModeFlipPlan","metadata":{"name":"applied"},"spec":{"targetMode":"802.3ad","vmProtection":"LiveMigrate","connectivityTimeout":"60s","approval":"Automatic"}}`)
	reason(c.Patch(ctx, &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "applied"}}, client.RawPatch(types.ApplyPatchType, applied), client.FieldOwner("test")))
	stored("applied")
	// Deleted, it is gone; deleted again, it is not found.
	reason(c.Delete(ctx, &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "written"}}))
	stored("written")
	reason(c.Delete(ctx, &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "written"}}))
	return out
}

func TestTheSimulatorSpellsTheHubsNames(t *testing.T) {
	t.Parallel()
	if checkpointKey != operator.CheckpointKey {
		t.Fatalf("checkpointKey is %q, the operator's %q", checkpointKey, operator.CheckpointKey)
	}
}

// TestFaithfulToARealAPIServer runs the hub's client calls against a real kube-apiserver and
// a simulated member holding the same objects, and compares what comes back.
func TestFaithfulToARealAPIServer(t *testing.T) {
	t.Parallel()
	real, sim, member := sides(t)
	both := []*side{real, sim}
	ctx := context.Background()

	t.Run("discovery", func(t *testing.T) {
		t.Parallel()
		got := map[string][]metav1.APIResource{}
		for _, s := range both {
			dc, err := discovery.NewDiscoveryClientForConfig(s.cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, gv := range groupVersions() {
				l, err := dc.ServerResourcesForGroupVersion(gv.String())
				if err != nil {
					t.Fatalf("%s: %s: %v", s.name, gv, err)
				}
				for _, r := range l.APIResources {
					base, _, _ := strings.Cut(r.Name, "/")
					if resourceFor(gv, base) != nil {
						r.StorageVersionHash = ""
						sort.Strings(r.Verbs)
						got[s.name] = append(got[s.name], r)
					}
				}
			}
			mapper, err := apiutil.NewDynamicRESTMapper(s.cfg, mustHTTPClient(t, s.cfg))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range served {
				m, err := mapper.RESTMapping(schema.GroupKind{Group: r.gvr.Group, Kind: r.kind}, r.gvr.Version)
				if err != nil {
					t.Fatalf("%s: mapping %s: %v", s.name, r.kind, err)
				}
				if m.Resource != r.gvr || (m.Scope.Name() == meta.RESTScopeNameNamespace) != r.namespaced {
					t.Errorf("%s: %s maps to %s scope %s", s.name, r.kind, m.Resource, m.Scope.Name())
				}
			}
		}
		// The order of a group's custom resources is not part of the API (the real server's
		// follows the CRDs' creation); compare by name.
		for _, rs := range got {
			sort.Slice(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name })
		}
		same(t, "discovery", got["real"], got["sim"])
	})

	t.Run("the administrator's writes", func(t *testing.T) {
		t.Parallel()
		admin, err := client.New(member.Admin(), client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		var got [2][]any
		for i, c := range []client.Client{real.client, admin} {
			got[i] = administratorWrites(ctx, t, c)
		}
		same(t, "the administrator's writes", got[0], got[1])
		// The hub's token writes nothing.
		err = sim.client.Create(ctx, &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "by-the-hub"}})
		if !apierrors.IsForbidden(err) {
			t.Errorf("a create with the hub's token: %v; want Forbidden", err)
		}
	})

	t.Run("version and readyz", func(t *testing.T) {
		t.Parallel()
		var versions, ready []any
		for _, s := range both {
			dc, err := discovery.NewDiscoveryClientForConfig(s.cfg)
			if err != nil {
				t.Fatal(err)
			}
			v, err := dc.ServerVersion()
			if err != nil {
				t.Fatal(err)
			}
			versions = append(versions, []string{v.Major, v.Minor, v.GitVersion, v.EmulationMajor, v.EmulationMinor})
			body, err := dc.RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ready = append(ready, string(body))
		}
		same(t, "/version", versions[0], versions[1])
		same(t, "/readyz", ready[0], ready[1])
	})

	t.Run("get, list, pages and field selectors", func(t *testing.T) {
		t.Parallel()
		var got [2][]any
		for i, s := range both {
			var nwc nwv1.NodewrightCluster
			var cm corev1.ConfigMap
			var dep appsv1.Deployment
			for _, g := range []struct {
				key client.ObjectKey
				obj client.Object
			}{{client.ObjectKey{Name: clusterName}, &nwc}, {client.ObjectKey{Namespace: namespace, Name: checkpointConfigMap}, &cm},
				{client.ObjectKey{Namespace: namespace, Name: operatorDeployment}, &dep}} {
				if err := s.client.Get(ctx, g.key, g.obj); err != nil {
					t.Fatalf("%s: get %s: %v", s.name, g.key, err)
				}
				got[i] = append(got[i], normalized(g.obj))
			}
			var missing corev1.ConfigMap
			err := s.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "absent"}, &missing)
			got[i] = append(got[i], apierrors.ReasonForError(err), err.Error())
			var agents nwv1.NodewrightAgentStatusList
			if err := s.client.List(ctx, &agents); err != nil {
				t.Fatal(err)
			}
			got[i] = append(got[i], names(&agents))
			var pages []any
			next := ""
			for {
				var page nwv1.NodewrightAgentStatusList
				if err := s.client.List(ctx, &page, client.Limit(2), client.Continue(next)); err != nil {
					t.Fatalf("%s: page after %q: %v", s.name, next, err)
				}
				pages = append(pages, names(&page), page.RemainingItemCount)
				if next = page.Continue; next == "" {
					break
				}
			}
			got[i] = append(got[i], pages)
			var named corev1.ConfigMapList
			if err := s.client.List(ctx, &named, client.InNamespace(namespace),
				client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", checkpointConfigMap)}); err != nil {
				t.Fatal(err)
			}
			got[i] = append(got[i], names(&named))
			var bad corev1.ConfigMapList
			err = s.client.List(ctx, &bad, client.InNamespace(namespace), client.MatchingFields{"data.x": "y"})
			got[i] = append(got[i], apierrors.ReasonForError(err))
		}
		same(t, "get and list", got[0], got[1])
	})

	t.Run("metadata list and watch", func(t *testing.T) {
		t.Parallel()
		var got [2][]any
		gvr := nwv1.GroupVersion.WithResource("nodewrightagentstatuses")
		for i, s := range both {
			mc, err := metadata.NewForConfig(s.cfg)
			if err != nil {
				t.Fatal(err)
			}
			l, err := mc.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 25})
			if err != nil {
				t.Fatal(err)
			}
			got[i] = append(got[i], l.Kind, len(l.Items), l.Items[0].Name, l.Items[0].Kind)
			w, err := mc.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion, AllowWatchBookmarks: true})
			if err != nil {
				t.Fatal(err)
			}
			obj := &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: "node-new"}}
			if err := s.put(obj); err != nil {
				t.Fatal(err)
			}
			ev := next(t, w, watch.Added, watch.Modified, watch.Deleted)
			m, _ := ev.Object.(*metav1.PartialObjectMetadata)
			if m == nil {
				t.Fatalf("%s: a metadata watch sent a %T", s.name, ev.Object)
			}
			got[i] = append(got[i], string(ev.Type), m.Name, m.Kind)
			w.Stop()
		}
		same(t, "metadata list and watch", got[0], got[1])
	})

	t.Run("a watch from a too old version gets 410", func(t *testing.T) {
		t.Parallel()
		var got []any
		for _, s := range both {
			w, err := s.client.Watch(ctx, &nwv1.NodewrightAgentStatusList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "1"}})
			if err != nil {
				got = append(got, "error", apierrors.ReasonForError(err))
				continue
			}
			ev := next(t, w, watch.Error)
			st, _ := ev.Object.(*metav1.Status)
			if st == nil {
				t.Fatalf("%s: watch from version 1 sent %s %T", s.name, ev.Type, ev.Object)
			}
			got = append(got, string(ev.Type), st.Code, st.Reason, strings.HasPrefix(st.Message, "too old resource version: 1 ("))
			w.Stop()
		}
		same(t, "a watch from version 1", got[:len(got)/2], got[len(got)/2:])
	})

	t.Run("wrong token", func(t *testing.T) {
		t.Parallel()
		var got []any
		for _, s := range both {
			cfg := rest.AnonymousClientConfig(s.cfg)
			cfg.BearerToken = "wrong"
			dc, err := discovery.NewDiscoveryClientForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = dc.RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
			got = append(got, apierrors.ReasonForError(err), err.Error())
		}
		same(t, "a wrong token", got[:2], got[2:])
	})
}

// TestWatchesAndCachesSeeChangesAsOnARealAPIServer: a watch from a list's version sees an
// update and a delete in order, and a controller-runtime cluster with the hub's cache
// options syncs and sees a change.
func TestWatchesAndCachesSeeChangesAsOnARealAPIServer(t *testing.T) {
	t.Parallel()
	real, sim, _ := sides(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got [2][]any
	for i, s := range []*side{real, sim} {
		var l nwv1.BondModeFlipPlanList
		if err := s.client.List(ctx, &l); err != nil {
			t.Fatal(err)
		}
		w, err := s.client.Watch(ctx, &nwv1.BondModeFlipPlanList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: l.ResourceVersion}})
		if err != nil {
			t.Fatal(err)
		}
		changed := l.Items[0].DeepCopy()
		changed.Status.Phase = nwv1.WorkflowFailed
		if err := s.put(changed); err != nil {
			t.Fatal(err)
		}
		if err := s.remove(&l.Items[1]); err != nil {
			t.Fatal(err)
		}
		var lastRV string
		for range 2 {
			ev := next(t, w, watch.Modified, watch.Deleted)
			o := ev.Object.(*nwv1.BondModeFlipPlan)
			if lastRV != "" && len(o.ResourceVersion) <= len(lastRV) && o.ResourceVersion <= lastRV {
				t.Errorf("%s: resourceVersion %s after %s", s.name, o.ResourceVersion, lastRV)
			}
			lastRV = o.ResourceVersion
			got[i] = append(got[i], string(ev.Type), o.Name, string(o.Status.Phase))
		}
		w.Stop()

		// The hub's member cache: the NodewrightCluster singleton, and in the namespace the two
		// objects it reads, each by name.
		named := func(name string) fields.Selector { return fields.OneTermEqualSelector("metadata.name", name) }
		cl, err := cluster.New(s.cfg, func(o *cluster.Options) {
			o.Scheme = scheme
			o.Cache.ByObject = map[client.Object]cache.ByObject{
				&nwv1.NodewrightCluster{}: {Field: named(clusterName)},
				&corev1.ConfigMap{}:       {Namespaces: map[string]cache.Config{namespace: {}}, Field: named(checkpointConfigMap)},
				&appsv1.Deployment{}:      {Namespaces: map[string]cache.Config{namespace: {}}, Field: named(operatorDeployment)},
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = cl.Start(ctx) }()
		for _, obj := range []client.Object{&nwv1.NodewrightCluster{}, &corev1.ConfigMap{}, &appsv1.Deployment{}} {
			if _, err := cl.GetCache().GetInformer(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
		if !cl.GetCache().WaitForCacheSync(ctx) {
			t.Fatalf("%s: the cache did not sync", s.name)
		}
		var nwc nwv1.NodewrightCluster
		if err := cl.GetClient().Get(ctx, client.ObjectKey{Name: clusterName}, &nwc); err != nil {
			t.Fatal(err)
		}
		nwc.Status.Phase = nwv1.ClusterDegraded
		if err := s.put(&nwc); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, func() string {
			var seen nwv1.NodewrightCluster
			if err := cl.GetClient().Get(ctx, client.ObjectKey{Name: clusterName}, &seen); err != nil {
				return err.Error()
			}
			if seen.Status.Phase != nwv1.ClusterDegraded {
				return fmt.Sprintf("%s: the cache holds phase %s", s.name, seen.Status.Phase)
			}
			return ""
		})
		var dep appsv1.Deployment
		if err := cl.GetClient().Get(ctx, client.ObjectKey{Namespace: namespace, Name: operatorDeployment}, &dep); err != nil {
			t.Fatal(err)
		}
		got[i] = append(got[i], dep.Labels[versionLabel])
	}
	same(t, "watch events and the cache", got[0], got[1])
}

// TestBookmarks is on the simulator alone: the real API server's watch cache sends a bookmark
// about once a minute, too slow for a test (a watch with a 5 s timeout got none).
func TestBookmarks(t *testing.T) {
	t.Parallel()
	s := startSim(t, Options{Members: 1, BookmarkInterval: 200 * time.Millisecond})
	m := s.Members()[0]
	c, err := client.NewWithWatch(memberConfig(s, m, m.Token()), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var l corev1.ConfigMapList
	if err := c.List(ctx, &l, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(namespace),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: l.ResourceVersion, AllowWatchBookmarks: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := m.UpdateCluster(func(c *nwv1.NodewrightCluster) { c.Status.Nodes.Ready = 2 }); err != nil {
		t.Fatal(err)
	}
	ev := next(t, w, watch.Bookmark)
	cm, _ := ev.Object.(*corev1.ConfigMap)
	if cm == nil || cm.ResourceVersion == l.ResourceVersion {
		t.Fatalf("the bookmark is %#v, want a ConfigMap with the member's version after the cluster's write", ev.Object)
	}
}

func names(l client.ObjectList) []string {
	var out []string
	_ = meta.EachListItem(l, func(o apiruntime.Object) error {
		out = append(out, o.(metav1.Object).GetName())
		return nil
	})
	return out
}

// next is the watch's next event of one of the types, skipping others (bookmarks).
func next(t *testing.T, w watch.Interface, types ...watch.EventType) watch.Event {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended before a %v", types)
			}
			for _, typ := range types {
				if ev.Type == typ {
					return ev
				}
			}
		case <-timeout:
			t.Fatalf("no %v within a minute", types)
		}
	}
}

func mustHTTPClient(t *testing.T, cfg *rest.Config) *http.Client {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return hc
}
