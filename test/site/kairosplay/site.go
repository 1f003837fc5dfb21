package kairosplay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// HostFile is the file, in a host's Dir, that says where its registry and its played DRBD are
// (Save), for a process of its own (the agent built for the local site) to open the host from
// its Dir.
const HostFile = "host.json"

type hostFile struct {
	Registry string `json:"registry"`
	DRBDDir  string `json:"drbdDir,omitempty"`
}

// Save writes HostFile into h.Dir.
func (h *Host) Save() error {
	raw, err := json.Marshal(hostFile{Registry: h.Registry.Dir, DRBDDir: h.DRBDDir})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(h.Dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(h.Dir, HostFile), raw, 0o644)
}

// Open is the host Save saved in dir, its root at root (the agent's --host-root).
func Open(dir, root string) (*Host, error) {
	raw, err := os.ReadFile(filepath.Join(dir, HostFile))
	if err != nil {
		return nil, fmt.Errorf("the played Kairos host in %s: %w", dir, err)
	}
	var f hostFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("the played Kairos host in %s: %s: %w", dir, HostFile, err)
	}
	if f.Registry == "" {
		return nil, fmt.Errorf("the played Kairos host in %s: %s names no registry", dir, HostFile)
	}
	return &Host{Root: root, Dir: dir, Registry: Registry{Dir: f.Registry}, DRBDDir: f.DRBDDir}, nil
}

// AgentParts are the parts of the agent's Kairos operations (internal/agent's Kairos) on a
// played host: the agent built for the local site (cmd/agent/site.go) sets them on the Kairos
// its kairosOS hook returns.
type AgentParts struct {
	// Runner plays kairos-agent and runs grub-editenv (Runner).
	Runner Runner
	// KairosAgent, GRUBEditenv and Systemctl are the argv prefixes the Runner knows. The
	// block is the host's own file, under its root: no mount(8) is run (the agent's
	// Kairos.Mount stays empty).
	KairosAgent, GRUBEditenv, Systemctl []string
	// Reboot is the played power cycle's request: it records the request in the host's Dir
	// (RequestReboot) and ends the process at once with SIGKILL, with no graceful shutdown, as
	// a machine's power going would; the site's supervisor (siteagent) boots the host and
	// starts the agent again. It returns only when it cannot do so.
	Reboot func(context.Context) error
}

// ForAgent are the AgentParts of the host saved in dir, its root at root.
func ForAgent(dir, root string) (AgentParts, error) {
	h, err := Open(dir, root)
	if err != nil {
		return AgentParts{}, err
	}
	return AgentParts{
		Runner:      Runner{Host: h},
		KairosAgent: []string{"kairos-agent"},
		GRUBEditenv: []string{"grub-editenv"},
		Systemctl:   []string{"systemctl"},
		Reboot: func(context.Context) error {
			if err := h.RequestReboot(); err != nil {
				return fmt.Errorf("the played reboot: %w", err)
			}
			return errors.Join(errors.New("the played reboot: the process outlived its SIGKILL"),
				syscall.Kill(os.Getpid(), syscall.SIGKILL))
		},
	}, nil
}
