package cli

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// scheme knows the core Kubernetes kinds, Nodewright's, the fleet hub's, and KubeVirt's VMs and
// VM snapshots.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(nwv1.AddToScheme(s))
	utilruntime.Must(fleetv1alpha1.AddToScheme(s))
	utilruntime.Must(virtv1.AddToScheme(s))
	utilruntime.Must(snapv1.AddToScheme(s))
	return s
}()

// Client is a direct (uncached) client for the API server the flags name, with the core and
// Nodewright kinds registered.
func (f *Factory) Client() (client.WithWatch, error) {
	cfg, err := f.RESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	return c, nil
}
