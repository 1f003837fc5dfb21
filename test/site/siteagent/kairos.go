package siteagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"testing"

	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

// Supervisor is the played machine of a node whose agent runs on a played Kairos host
// (Options.Kairos): it restarts the agent after each played reboot.
type Supervisor struct {
	// Host is the node's played Kairos host.
	Host *kairosplay.Host

	mu       sync.Mutex
	cur      *exec.Cmd
	boots    []kairosplay.Booted
	killed   bool
	down     bool
	exited   error
	err      error
	done     chan struct{}
	command  func() *exec.Cmd
	log      io.Writer
	nodeName string
}

var supervisors sync.Map // the first *exec.Cmd of a supervised agent → *Supervisor

// Supervised is the Supervisor of an agent Start started on a played Kairos host, from the
// process Start returned; nil for any other.
func Supervised(cmd *exec.Cmd) *Supervisor {
	s, _ := supervisors.Load(cmd)
	sup, _ := s.(*Supervisor)
	return sup
}

// startKairos starts node's agent on its played Kairos host with args and the Kairos ones, and
// supervises it.
func startKairos(t testing.TB, n *netsite.Network, node string, host *kairosplay.Host, args []string) *exec.Cmd {
	t.Helper()
	nd := n.Node(node)
	if host.Root != nd.Root {
		t.Fatalf("the played Kairos host of %s: its root %q is not the node's, %s", node, host.Root, nd.Root)
	}
	if host.DRBDDir == "" {
		host.DRBDDir = nd.DRBDDir
	}
	args = append(args, "--host-proc", host.Proc(), "--site-kairos-dir", host.Dir)
	argv := append([]string{Build(t)}, args...)
	return Supervise(t, node, host, func() *exec.Cmd { return n.Command(node, argv...) })
}

// Supervise runs the process command makes (again after each played reboot) as the agent of
// node on host, which must have been installed (Host.Install): Start's supervision
// (Options.Kairos) of any program, ended when the test ends (Run's, tied to the test). It
// returns the first process.
func Supervise(t testing.TB, node string, host *kairosplay.Host, command func() *exec.Cmd) *exec.Cmd {
	t.Helper()
	log := &testenv.SyncBuffer{}
	s, cmd, err := Run(node, host, command, log)
	if err != nil {
		t.Fatal(err)
	}
	supervisors.Store(cmd, s)
	t.Cleanup(func() {
		s.kill()
		supervisors.Delete(cmd)
		if err := s.Err(); err != nil {
			t.Errorf("the played machine of %s: %v", node, err)
		}
		if t.Failed() {
			t.Logf("agent %s (every boot):\n%s", node, log)
		}
	})
	return cmd
}

// Run is Supervise without a test: it runs the process command makes as the agent of node on
// host, which must have been installed (Host.Install), and again after each played reboot,
// every process's output and the supervision's own lines ("--- node booted ... ---") written
// to log (safe for concurrent writes: an *os.File, say). It returns the supervision and the
// first process; Stop ends it.
func Run(node string, host *kairosplay.Host, command func() *exec.Cmd, log io.Writer) (*Supervisor, *exec.Cmd, error) {
	if id, err := host.BootID(); err != nil {
		return nil, nil, fmt.Errorf("the played Kairos host of %s has not booted (Host.Install): %w", node, err)
	} else if id == "" {
		return nil, nil, fmt.Errorf("the played Kairos host of %s has not booted (Host.Install): no boot ID", node)
	}
	if err := host.Save(); err != nil {
		return nil, nil, err
	}
	s := &Supervisor{Host: host, done: make(chan struct{}), command: command, log: log, nodeName: node}
	cmd, err := s.start()
	if err != nil {
		return nil, nil, err
	}
	go s.run(cmd)
	return s, cmd, nil
}

// Stop ends the supervision for good: the agent's process is killed (SIGKILL) and not started
// again. It returns the supervision's own failure (Err), if any.
func (s *Supervisor) Stop() error {
	s.kill()
	return s.Err()
}

// start starts the agent's process once.
func (s *Supervisor) start() (*exec.Cmd, error) {
	cmd := s.command()
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.cur = cmd
	if s.killed {
		// Killed since the boot was played (kill saw the process before this one): this one
		// goes too, and the supervision ends when it has.
		_ = cmd.Process.Kill()
	}
	s.mu.Unlock()
	return cmd, nil
}

// run waits for each process of the agent in turn: one that ended with a reboot requested is
// a power cycle, played, and the agent is started again; a kill, a node that does not come
// back or a process that ended by itself (not a reboot) end the supervision.
func (s *Supervisor) run(cmd *exec.Cmd) {
	defer close(s.done)
	for {
		waitErr := cmd.Wait()
		s.mu.Lock()
		killed := s.killed
		s.mu.Unlock()
		if killed {
			return
		}
		requested, err := s.Host.RebootRequested()
		if err != nil || !requested {
			s.finish(func() { s.err, s.exited = err, waitErr })
			return
		}
		fmt.Fprintf(s.log, "--- %s: the agent's process ended (%v), a reboot requested: the machine restarts ---\n", s.nodeName, waitErr)
		booted, err := s.Host.Boot(context.Background())
		if errors.Is(err, kairosplay.ErrNoReturn) {
			fmt.Fprintf(s.log, "--- %s: %v ---\n", s.nodeName, err)
			s.finish(func() { s.down = true })
			return
		}
		if err != nil {
			s.finish(func() { s.err = fmt.Errorf("the played boot: %w", err) })
			return
		}
		fmt.Fprintf(s.log, "--- %s booted %s (%s) boot ID %s, fallback %v ---\n", s.nodeName, booted.Entry, booted.Image, booted.BootID, booted.Fallback)
		s.mu.Lock()
		if s.killed {
			s.mu.Unlock()
			return
		}
		s.boots = append(s.boots, booted)
		s.mu.Unlock()
		if cmd, err = s.start(); err != nil {
			s.finish(func() { s.err = fmt.Errorf("starting the agent after the boot: %w", err) })
			return
		}
	}
}

func (s *Supervisor) finish(set func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set()
}

// kill ends the agent for good (no restart) and waits for the supervision to end.
func (s *Supervisor) kill() {
	s.mu.Lock()
	s.killed = true
	cur := s.cur
	s.mu.Unlock()
	if cur != nil && cur.Process != nil {
		_ = cur.Process.Kill()
	}
	<-s.done
}

// Boots are the played boots since Start (not the installation's), in order.
func (s *Supervisor) Boots() []kairosplay.Booted {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]kairosplay.Booted(nil), s.boots...)
}

// Down reports whether the node did not come back from a reboot (no agent runs).
func (s *Supervisor) Down() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

// Exited is the error of an agent process that ended by itself, with no reboot requested
// (the supervision then ended: a crash is not played as a reboot); nil otherwise.
func (s *Supervisor) Exited() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exited
}

// Err is the supervision's own failure: a boot or a start that failed; nil otherwise.
func (s *Supervisor) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Done is closed once the supervision ended (a kill, a node down, an agent that ended by
// itself, or an error).
func (s *Supervisor) Done() <-chan struct{} { return s.done }
