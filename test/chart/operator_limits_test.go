package chart_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestOperatorLimitsFollowTheValues: in every variant, and with the copier image by tag or by
// digest, the chart renders the operator's policies (templates/operator-limits.yaml,
// operator-vm-limits.yaml, operator-node-limits.yaml, operator-volume-limits.yaml) with Fail and
// a Deny binding, for exactly
// the user of the ServiceAccount the ClusterRole is bound to (the node taints' binding takes
// every EdgeProfile as its parameter, and lets a cluster without one through); the
// Jobs policy holds them to the very image the operator's --copy-image names and refuses the
// release's, the agent's, the legacy and the kube-system namespace; and the webhook policy
// names the configurations the chart renders. test/operatorrestriction proves on an API
// server what the rules admit and refuse; this proves they follow the values.
func TestOperatorLimitsFollowTheValues(t *testing.T) {
	type variant = struct {
		name  string
		args  []string
		agent bool
	}
	cases := append(slices.Clone(variants),
		variant{"copy image by digest", []string{"--set", "copyImage.digest=sha256:" + strings.Repeat("1b", 32), "--set", "legacy.namespace=" + legacyNS}, true},
		variant{"webhooks off", []string{"--set", "webhook.enabled=false", "--set", "agent.namespace=nw-agent"}, true})
	for _, v := range cases {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, v.args...)

			o, ok := find(objs, "ClusterRoleBinding", "nodewright-operator")
			if !ok {
				t.Fatal("no ClusterRoleBinding nodewright-operator")
			}
			var crb rbacv1.ClusterRoleBinding
			o.decode(t, &crb)
			if len(crb.Subjects) != 1 {
				t.Fatalf("%s binds %v", o, crb.Subjects)
			}
			user := fmt.Sprintf("system:serviceaccount:%s:%s", crb.Subjects[0].Namespace, crb.Subjects[0].Name)
			if _, ok := find(objs, "ServiceAccount", crb.Subjects[0].Name); !ok {
				t.Errorf("the ClusterRole is bound to ServiceAccount %s, which the chart does not render", crb.Subjects[0].Name)
			}

			copyImage, ok := argValue(operatorContainer(t, objs), "--copy-image")
			if !ok {
				t.Fatal("the operator has no --copy-image")
			}
			legacy, ok := find(objs, "Role", "nodewright-operator-legacy")
			if !ok {
				t.Fatal("no Role nodewright-operator-legacy")
			}
			legacyNS := legacy.Metadata.Namespace
			agentNS := setValue(v.args, "agent.namespace", agentNS) // all-on has the default

			policies := map[string]admissionregistrationv1.ValidatingAdmissionPolicy{}
			for _, name := range []string{"nodewright-operator-copy-jobs", "nodewright-operator-webhook-ca-bundle",
				"nodewright-operator-virtual-machines", "nodewright-operator-vm-migrations", "nodewright-operator-vm-restores", "nodewright-operator-volumes",
				"nodewright-operator-nodes", "nodewright-operator-node-taints"} {
				o, ok := find(objs, "ValidatingAdmissionPolicy", name)
				if !ok {
					t.Fatalf("no ValidatingAdmissionPolicy %s", name)
				}
				var p admissionregistrationv1.ValidatingAdmissionPolicy
				o.decode(t, &p)
				policies[name] = p
				if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
					t.Errorf("%s: failurePolicy %v, want Fail", o, p.Spec.FailurePolicy)
				}
				want := "request.userInfo.username == " + strconv.Quote(user)
				if len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Expression != want {
					t.Errorf("%s: matchConditions %+v, want the one %q", o, p.Spec.MatchConditions, want)
				}
				o, ok = find(objs, "ValidatingAdmissionPolicyBinding", name)
				if !ok {
					t.Fatalf("no ValidatingAdmissionPolicyBinding %s", name)
				}
				var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
				o.decode(t, &b)
				if b.Spec.PolicyName != name || len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionregistrationv1.Deny ||
					b.Spec.MatchResources != nil {
					t.Errorf("%s: %+v, want policy %s, validationActions [Deny] and nothing narrowing it", o, b.Spec, name)
				}
				params := name == "nodewright-operator-node-taints"
				if everyProfile := b.Spec.ParamRef != nil && b.Spec.ParamRef.Name == "" && b.Spec.ParamRef.Selector != nil &&
					len(b.Spec.ParamRef.Selector.MatchLabels)+len(b.Spec.ParamRef.Selector.MatchExpressions) == 0 &&
					b.Spec.ParamRef.ParameterNotFoundAction != nil && *b.Spec.ParamRef.ParameterNotFoundAction == admissionregistrationv1.AllowAction; params != everyProfile ||
					!params && b.Spec.ParamRef != nil {
					t.Errorf("%s: paramRef %+v; want every EdgeProfile (Allow when there is none) for the node taints, none for the others", o, b.Spec.ParamRef)
				}
			}

			jobs := variablesOf(policies["nodewright-operator-copy-jobs"])
			if got, want := strings.TrimSpace(jobs["copyImage"]), strconv.Quote(copyImage); got != want {
				t.Errorf("the Jobs policy holds them to the image %s; the operator's --copy-image is %s", got, want)
			}
			for _, ns := range []string{releaseNS, agentNS, legacyNS, "kube-system"} {
				if !strings.Contains(jobs["refusedNamespace"], "request.namespace == "+strconv.Quote(ns)+" ?") {
					t.Errorf("the Jobs policy does not refuse namespace %s: %s", ns, jobs["refusedNamespace"])
				}
			}

			own := variablesOf(policies["nodewright-operator-webhook-ca-bundle"])["own"]
			for kind, resource := range map[string]string{"MutatingWebhookConfiguration": "mutatingwebhookconfigurations", "ValidatingWebhookConfiguration": "validatingwebhookconfigurations"} {
				var names []string
				for _, o := range objs {
					if o.Kind == kind {
						names = append(names, o.Metadata.Name)
					}
				}
				if len(names) > 1 {
					t.Fatalf("%d %ss rendered; the policy allows the operator one", len(names), kind)
				}
				if len(names) == 0 {
					continue // webhooks off
				}
				want := fmt.Sprintf("request.resource.resource == '%s' ? '%s'", resource, names[0])
				if !strings.Contains(own, want) {
					t.Errorf("the webhook policy does not let the operator update the rendered %s %s (want %q in %q)", kind, names[0], want, own)
				}
			}
		})
	}
}

// variablesOf is the policy's variables' expressions, by name.
func variablesOf(p admissionregistrationv1.ValidatingAdmissionPolicy) map[string]string {
	out := map[string]string{}
	for _, v := range p.Spec.Variables {
		out[v.Name] = v.Expression
	}
	return out
}

// setValue is the value args --set for key, or def.
func setValue(args []string, key, def string) string {
	for i := 1; i < len(args); i++ {
		if v, ok := strings.CutPrefix(args[i], key+"="); ok && args[i-1] == "--set" {
			return v
		}
	}
	return def
}
