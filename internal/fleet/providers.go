package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

// A member's name on the hub is its source's prefix and its registration there:
// "kubeconfig/<secret>" or "clusterprofile/<namespace>/<name>".
const (
	kubeconfigPrefix     = "kubeconfig/"
	clusterProfilePrefix = "clusterprofile/"
)

// registrationOf says which hub object registered the member.
func registrationOf(member, kubeconfigNamespace string) (fleetv1alpha1.Registration, bool) {
	if name, ok := strings.CutPrefix(member, kubeconfigPrefix); ok {
		return fleetv1alpha1.Registration{Source: fleetv1alpha1.FromKubeconfigSecret, Namespace: kubeconfigNamespace, Name: name}, true
	}
	if rest, ok := strings.CutPrefix(member, clusterProfilePrefix); ok {
		if ns, name, ok := strings.Cut(rest, "/"); ok {
			return fleetv1alpha1.Registration{Source: fleetv1alpha1.FromClusterProfile, Namespace: ns, Name: name}, true
		}
	}
	return fleetv1alpha1.Registration{}, false
}

// SummaryName is the name of the registration's summary, by its source, so that no two
// registrations share one: "kubeconfig.<secret>" and "clusterprofile.<namespace>.<name>" (a
// namespace holds no dot). A name that would be longer than a name may be keeps its first
// 242 characters and ends in "-" and 10 hexadecimal digits of the registration's hash.
func SummaryName(reg fleetv1alpha1.Registration) string {
	var name string
	switch reg.Source {
	case fleetv1alpha1.FromClusterProfile:
		name = "clusterprofile." + reg.Namespace + "." + reg.Name
	default:
		name = "kubeconfig." + reg.Name
	}
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(string(reg.Source) + "/" + reg.Namespace + "/" + reg.Name))
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
	head := strings.TrimRight(name[:validation.DNS1123SubdomainMaxLength-len(suffix)], ".-")
	return head + suffix
}
