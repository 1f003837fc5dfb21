package main

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/multicluster-runtime/providers/kubeconfig"

	"github.com/spectrocloud/nodewright/test/site/fleetsim"
)

const hubNamespace = "nodewright-fleet"

// register gives the hub every member through a kubeconfig Secret with the member's token,
// sixteen at a time.
func register(ctx context.Context, hub client.Client, members []*fleetsim.Member) error {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, m := range members {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			kc, err := m.Kubeconfig()
			if err == nil {
				err = hub.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: hubNamespace, Name: m.Name(),
					Labels: map[string]string{kubeconfig.DefaultKubeconfigSecretLabel: "true"}},
					Data: map[string][]byte{"kubeconfig": kc}})
			}
			if err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("registering %s: %w", m.Name(), err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}
