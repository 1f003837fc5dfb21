package fleetsim

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// resource is one kind a member serves.
type resource struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
	singular   string
	shortNames []string
	categories []string
	// verbs are what discovery lists, as a real member with the kind installed does; the
	// simulator serves get, list and watch of them and forbids the rest, as the member's
	// read-only role for the hub does.
	verbs []string
	// subresources are the resource's discovery entries besides its own.
	subresources []metav1.APIResource
	// noGeneration says the kind has no metadata.generation (a ConfigMap, which has no spec).
	noGeneration bool
	// custom says the kind is a custom resource: an update must name a resourceVersion, and
	// any change but to its metadata and status bumps its generation (a built-in kind's
	// spec alone does).
	custom bool
	// conditional says an update must name a resourceVersion (a CustomResourceDefinition).
	conditional bool
}

const nodewrightGroup = "nodewright.spectrocloud.com"

var (
	builtinVerbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	// crdVerbs are in the order the apiextensions server lists them.
	crdVerbs    = []string{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}
	statusVerbs = []string{"get", "patch", "update"}
)

// crd is a cluster-scoped Nodewright kind with a status subresource, as config/crd/bases
// defines each of those the hub reads.
func crd(plural, singular, kind string, shortNames ...string) *resource {
	return &resource{gvr: schema.GroupVersionResource{Group: nodewrightGroup, Version: "v1alpha1", Resource: plural},
		kind: kind, singular: singular, shortNames: shortNames, categories: []string{"nodewright"}, verbs: crdVerbs, custom: true, conditional: true,
		subresources: []metav1.APIResource{{Name: plural + "/status", Kind: kind, Verbs: statusVerbs}}}
}

// served are the kinds a member serves: what the hub reads, and the CustomResourceDefinitions.
var served = []*resource{
	{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, kind: "ConfigMap", namespaced: true,
		singular: "configmap", shortNames: []string{"cm"}, verbs: builtinVerbs, noGeneration: true},
	{gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, kind: "Deployment", namespaced: true,
		singular: "deployment", shortNames: []string{"deploy"}, categories: []string{"all"}, verbs: builtinVerbs,
		subresources: []metav1.APIResource{
			{Name: "deployments/scale", Namespaced: true, Group: "autoscaling", Version: "v1", Kind: "Scale", Verbs: statusVerbs},
			{Name: "deployments/status", Namespaced: true, Kind: "Deployment", Verbs: statusVerbs}}},
	// The hub does not read CustomResourceDefinitions; a member's administrator does.
	{gvr: schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
		kind: "CustomResourceDefinition", singular: "customresourcedefinition", shortNames: []string{"crd", "crds"},
		categories: []string{"api-extensions"}, verbs: builtinVerbs, conditional: true,
		subresources: []metav1.APIResource{{Name: "customresourcedefinitions/status", Kind: "CustomResourceDefinition", Verbs: statusVerbs}}},
	crd("bondmodeflipplans", "bondmodeflipplan", "BondModeFlipPlan", "bmfp", "bondflip"),
	crd("nodewrightagentstatuses", "nodewrightagentstatus", "NodewrightAgentStatus", "nwa"),
	crd("nodewrightclusters", "nodewrightcluster", "NodewrightCluster", "nwc"),
	crd("replicationupgrades", "replicationupgrade", "ReplicationUpgrade", "rupg", "replup"),
}

// resourceFor is the served resource of the group, version and plural name; nil if none.
func resourceFor(gv schema.GroupVersion, plural string) *resource {
	for _, r := range served {
		if r.gvr.GroupVersion() == gv && r.gvr.Resource == plural {
			return r
		}
	}
	return nil
}

// resourceOfKind is the served resource of the kind; nil if none.
func resourceOfKind(gvk schema.GroupVersionKind) *resource {
	for _, r := range served {
		if r.gvr.GroupVersion() == gvk.GroupVersion() && r.kind == gvk.Kind {
			return r
		}
	}
	return nil
}

func (r *resource) apiVersion() string { return r.gvr.GroupVersion().String() }

// groupVersions are the served group versions, the core group first, as /apis lists groups
// in the API server's order (apps before the custom resources' groups).
func groupVersions() []schema.GroupVersion {
	var out []schema.GroupVersion
	for _, r := range served {
		gv := r.gvr.GroupVersion()
		seen := false
		for _, o := range out {
			seen = seen || o == gv
		}
		if !seen {
			out = append(out, gv)
		}
	}
	return out
}

// resourceList is the legacy discovery document of one group version.
func resourceList(gv schema.GroupVersion) *metav1.APIResourceList {
	l := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String()}
	for _, r := range served {
		if r.gvr.GroupVersion() != gv {
			continue
		}
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: r.gvr.Resource, SingularName: r.singular,
			Namespaced: r.namespaced, Kind: r.kind, Verbs: r.verbs, ShortNames: r.shortNames, Categories: r.categories})
		for _, sub := range r.subresources {
			sub.Namespaced = r.namespaced
			l.APIResources = append(l.APIResources, sub)
		}
	}
	return l
}

// groupList is the legacy /apis document: every served group but the core one.
func groupList() *metav1.APIGroupList {
	l := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
	for _, gv := range groupVersions() {
		if gv.Group == "" {
			continue
		}
		l.Groups = append(l.Groups, *apiGroup(gv))
	}
	return l
}

func apiGroup(gv schema.GroupVersion) *metav1.APIGroup {
	v := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
	return &metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: gv.Group,
		Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v}
}
