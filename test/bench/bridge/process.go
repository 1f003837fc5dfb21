package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is a program under measurement (the operator, the bare observer), run as its own
// process so that its CPU time and RSS are its own.
type process struct {
	cmd *exec.Cmd
	log *os.File
}

// startOperator runs the operator as deployed, its admission webhook server included, with
// its pprof endpoint on pprofAddr.
func startOperator(binary, kubeconfig, logPath, pprofAddr string) (*process, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return startProcess(exec.Command(binary, "--kubeconfig", kubeconfig, "--leader-elect=false",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--pprof-bind-address", pprofAddr,
		"--webhook-host", "127.0.0.1", "--webhook-port", port, "--webhook-cert-hosts", "127.0.0.1"), logPath)
}

// startBareObserver runs this program again as the bare observer (see runBareObserver).
func startBareObserver(kubeconfig, logPath string) (*process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), bareObserverEnv+"="+kubeconfig)
	return startProcess(cmd, logPath)
}

func startProcess(cmd *exec.Cmd, logPath string) (*process, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	// A benchmark killed outright takes what it measures with it, rather than leaving an
	// operator and an observer running against an API server that is gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	return &process{cmd: cmd, log: log}, nil
}

// freePort is a TCP port free on 127.0.0.1 a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
	}
	_ = p.log.Close()
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat (100 on Linux).
const clockTicks = 100

// cpuTime is the user and system CPU time the process has used.
func (p *process) cpuTime() (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may contain spaces.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("unexpected /proc stat: %q", data)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected /proc stat: %q", data)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// peakRSS is the process's high-water resident set size in bytes.
func (p *process) peakRSS() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kib << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", p.cmd.Process.Pid)
}

// rssParts is the process's resident set now, split into anonymous memory (heap, stacks)
// and file-backed pages (mostly the binary's own), in bytes.
func (p *process) rssParts() (anon, file int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || (key != "RssAnon" && key != "RssFile") {
			continue
		}
		kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status %s: %w", p.cmd.Process.Pid, key, err)
		}
		if key == "RssAnon" {
			anon = kib << 10
		} else {
			file = kib << 10
		}
	}
	return anon, file, nil
}
