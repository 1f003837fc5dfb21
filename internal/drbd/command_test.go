package drbd

import (
	"reflect"
	"strings"
	"testing"
)

const (
	threeNodeResource = "pvc-4f6d0c1e-2b7a-4c3e-9d1a-7e5b8c2f0a11"
	twoVolumeResource = "pvc-9b1e52a0-6c3d-4e8f-a2b7-0d4c6e8f1a23"
)

func TestCommandsAreArgv(t *testing.T) {
	build := map[string]func() ([]string, error){
		"pause-sync":  func() ([]string, error) { return PauseSyncCommand(threeNodeResource, "node-b") },
		"resume-sync": func() ([]string, error) { return ResumeSyncCommand(threeNodeResource, "node-b.edge.example") },
		"adjust":      func() ([]string, error) { return AdjustCommand(threeNodeResource) },
		"verify":      func() ([]string, error) { return VerifyCommand("r0") },
		"status":      func() ([]string, error) { return ResourceStatusCommand("r0") },
	}
	want := map[string][]string{
		"pause-sync":  {"drbdadm", "pause-sync", threeNodeResource + ":node-b"},
		"resume-sync": {"drbdadm", "resume-sync", threeNodeResource + ":node-b.edge.example"},
		"adjust":      {"drbdadm", "adjust", threeNodeResource},
		"verify":      {"drbdadm", "verify", "r0"},
		"status":      {"drbdsetup", "status", "r0", "--json"},
	}
	for name, build := range build {
		argv, err := build()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(argv, want[name]) {
			t.Errorf("%s: argv %q, want %q", name, argv, want[name])
		}
	}
}

func TestResourceNamesAreChecked(t *testing.T) {
	for _, good := range []string{"r0", "A", "pvc-4f6d0c1e-2b7a-4c3e-9d1a-7e5b8c2f0a11", "a.b_c+d-e", "0" + strings.Repeat("x", 47), "minor", "alls", "all-volumes"} {
		if err := ValidateResourceName(good); err != nil {
			t.Errorf("ValidateResourceName(%q): %v", good, err)
		}
	}
	bad := map[string]string{
		"":                            "does not match",
		"-r0":                         "does not match",
		"--config=/etc/evil":          "does not match",
		"r0:node-b":                   "does not match",
		"r0/0":                        "does not match",
		"r 0":                         "does not match",
		"r0\n":                        "does not match",
		"ré":                          "does not match",
		"0" + strings.Repeat("x", 48): "does not match",
		"all":                         "every resource",
		"minor-1000":                  "by its minor number",
		"minor-x":                     "by its minor number",
	}
	for name, reason := range bad {
		err := ValidateResourceName(name)
		if err == nil || !strings.HasPrefix(err.Error(), "resource ") || !strings.Contains(err.Error(), reason) {
			t.Errorf("ValidateResourceName(%q) = %v, want an error naming the resource and saying %q", name, err, reason)
		}
		if _, err := AdjustCommand(name); err == nil {
			t.Errorf("AdjustCommand(%q) built a command", name)
		}
		if _, err := PauseSyncCommand(name, "node-b"); err == nil {
			t.Errorf("PauseSyncCommand(%q, node-b) built a command", name)
		}
	}
}

func TestPeerNamesAreChecked(t *testing.T) {
	for _, good := range []string{"node-b", "n", "worker-1.edge.example.com", "0", strings.Repeat("a", 253)} {
		if err := ValidatePeerName(good); err != nil {
			t.Errorf("ValidatePeerName(%q): %v", good, err)
		}
	}
	bad := map[string]string{
		"":                       "empty",
		strings.Repeat("a", 254): "more than 253",
		"Node-B":                 "not a DNS subdomain",
		"-node":                  "not a DNS subdomain",
		"node-":                  "not a DNS subdomain",
		"node_b":                 "not a DNS subdomain",
		"node..b":                "not a DNS subdomain",
		"node b":                 "not a DNS subdomain",
		"node-b/0":               "not a DNS subdomain",
		"node-b:x":               "not a DNS subdomain",
		"--force":                "not a DNS subdomain",
	}
	for name, reason := range bad {
		err := ValidatePeerName(name)
		if err == nil || !strings.HasPrefix(err.Error(), "peer") || !strings.Contains(err.Error(), reason) {
			t.Errorf("ValidatePeerName(%q) = %v, want an error naming the peer and saying %q", name, err, reason)
		}
		if _, err := ResumeSyncCommand(threeNodeResource, name); err == nil {
			t.Errorf("ResumeSyncCommand(_, %q) built a command", name)
		}
	}
}
