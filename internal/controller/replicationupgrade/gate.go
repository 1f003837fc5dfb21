package replicationupgrade

import (
	"context"
	"fmt"
	"strings"
)

// checkGateUpstream compares where the LINSTOR gate forwards (its own flags, the chart's
// linstor.url and linstor.clientSecret) with what the EdgeProfile in force, signed by the
// site, says of LINSTOR (storage.linstor.url and clientSecretRef). The operator cannot send
// the gate anywhere; a profile that names another LINSTOR stops the upgrade at its Preflight,
// before anything changes. It says why when they differ, nothing when they agree or the
// profile names none.
func checkGateUpstream(ctx context.Context, s *scope) (string, error) {
	p := s.profile
	if p == nil || p.Spec.Storage.LINSTOR == nil {
		return "", nil
	}
	l := p.Spec.Storage.LINSTOR
	if l.URL == "" && l.ClientSecretRef == nil {
		return "", nil
	}
	up, err := s.lin.GateUpstream(ctx)
	if err != nil {
		return "", err
	}
	var differ []string
	if l.URL != "" && !sameBaseURL(l.URL, up.URL) {
		differ = append(differ, fmt.Sprintf("storage.linstor.url is %s, the LINSTOR gate forwards to %s", l.URL, up.URL))
	}
	if ref := l.ClientSecretRef; ref != nil && ref.Namespace+"/"+ref.Name != up.ClientSecret {
		gate := up.ClientSecret
		if gate == "" {
			gate = "none"
		}
		differ = append(differ, fmt.Sprintf("storage.linstor.clientSecretRef is %s/%s, the gate's client Secret %s", ref.Namespace, ref.Name, gate))
	}
	if len(differ) == 0 {
		return "", nil
	}
	return fmt.Sprintf("EdgeProfile %s and the LINSTOR gate disagree on LINSTOR: %s; set the chart's linstor.url and linstor.clientSecret to the profile's (the gate's flags decide where it forwards, never the operator)",
		p.Name, strings.Join(differ, "; ")), nil
}

// sameBaseURL compares two base URLs as LINSTOR's: scheme and host without case, a trailing
// slash ignored.
func sameBaseURL(a, b string) bool {
	norm := func(u string) string { return strings.ToLower(strings.TrimSuffix(u, "/")) }
	return norm(a) == norm(b)
}
