// Package osimage is the rule of which OS images a signed EdgeProfile allows a node to stage
// (spec.osImages), shared by the agent, which enforces it, and the operator, which refuses early
// what the agent would.
package osimage

import (
	"fmt"
	"strings"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Allowed says why image (REPOSITORY:TAG@sha256:DIGEST) is not allowed by the profile p,
// empty when it is: p's spec.osImages lists its repository, or the image itself.
func Allowed(p *nwv1.EdgeProfile, image string) string {
	named, _, _ := strings.Cut(image, "@")
	repository := named
	if i := strings.LastIndex(named, ":"); i > strings.LastIndex(named, "/") {
		repository = named[:i]
	}
	for _, allowed := range p.Spec.OSImages {
		if allowed == image || allowed == repository {
			return ""
		}
	}
	in := fmt.Sprintf("the EdgeProfile %s %s in force", p.Name, p.Spec.Version)
	if len(p.Spec.OSImages) == 0 {
		return fmt.Sprintf("%s allows no OS image (spec.osImages is empty)", in)
	}
	return fmt.Sprintf("%s allows only %s (spec.osImages): neither %s nor its repository %s", in,
		strings.Join(p.Spec.OSImages, ", "), image, repository)
}
