package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/legacysim"
)

const usage = `usage: legacy-sim COMMAND [flags] [arguments]

Plays the legacy node-init DaemonSet against a cluster: its state ConfigMap, the nodes'
heartbeats and its Events, exactly as the DaemonSet's contract says, and breaks the contract
on demand. See docs/legacy-sim.md.

Commands:
  run [--scenario NAME]    set the site up if needed, play a scenario, then keep heartbeating
                           until SIGTERM or SIGINT (scenarios: %s)
  silence NODE             stop NODE's heartbeat; a running 'run' honours it
  resume NODE              let NODE heartbeat again
  set-state STATE          write STATE as a transition would, even if it is unknown or not
                           allowed from the current state
  forbidden-jump           move to a state the current one may not go to
  jump-generation N        add N (negative: go back) to the generation without a transition
  garbage KEY VALUE        write VALUE into the ConfigMap key KEY as it is

Examples:
  legacy-sim run --scenario full --step-interval 3s
  legacy-sim run --scenario peer-lost --loop --kubeconfig .demo/kubeconfig
  legacy-sim silence edge-2
  legacy-sim set-state NOT_A_STATE
  legacy-sim jump-generation 5
  legacy-sim garbage node.edge-1.drbd '{not json'

Exit codes: 0 ok, 1 the cluster refused or failed, 2 bad input.
Run "legacy-sim COMMAND --help" for a command's flags.
`

// options are the parsed command line.
type options struct {
	command    *command
	kubeconfig string
	namespace  string
	configMapN string
	daemonSetN string
	component  string
	nodes      []legacysim.NodeSpec

	// run
	scenario          legacysim.Scenario
	stepInterval      time.Duration
	heartbeatInterval time.Duration
	loop              bool

	// the one-shot commands' arguments
	args []string
}

func (o options) configMap() types.NamespacedName {
	return types.NamespacedName{Namespace: o.namespace, Name: o.configMapN}
}

func (o options) daemonSet() types.NamespacedName {
	return types.NamespacedName{Namespace: o.namespace, Name: o.daemonSetN}
}

func parseArgs(args []string, stdout, stderr io.Writer) (options, error) {
	var o options
	if len(args) == 0 {
		fmt.Fprintf(stderr, usage, strings.Join(legacysim.ScenarioNames(), ", "))
		return o, errors.New("missing command")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(stdout, usage, strings.Join(legacysim.ScenarioNames(), ", "))
		return o, flag.ErrHelp
	}
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == args[0] })
	if i < 0 {
		fmt.Fprintf(stderr, usage, strings.Join(legacysim.ScenarioNames(), ", "))
		return o, fmt.Errorf("unknown command %q", args[0])
	}
	o.command = &commands[i]

	fs := flag.NewFlagSet("legacy-sim "+o.command.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		line := strings.TrimSpace("legacy-sim " + o.command.name + " [flags] " + o.command.argNames)
		fmt.Fprintf(fs.Output(), "usage: %s\n\n%s\n\nFlags:\n", line, o.command.summary)
		fs.PrintDefaults()
	}
	var nodes, scenario string
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.StringVar(&o.namespace, "namespace", "node-init", "namespace of the DaemonSet and its state ConfigMap")
	fs.StringVar(&o.configMapN, "configmap", "node-init-state", "name of the state ConfigMap")
	fs.StringVar(&o.daemonSetN, "daemonset", "node-init", "name of the DaemonSet")
	fs.StringVar(&o.component, "component", "node-init", "source component and reportingComponent of the Events")
	fs.StringVar(&nodes, "nodes", "edge-1,edge-2,edge-3", "the fleet, NAME[:ROLE],...; the first is the primary, the others default to secondary")
	if o.command.name == "run" {
		fs.StringVar(&scenario, "scenario", legacysim.ScenarioFull, "scenario to play: "+strings.Join(legacysim.ScenarioNames(), ", "))
		fs.DurationVar(&o.stepInterval, "step-interval", 3*time.Second, "pause after each transition")
		fs.DurationVar(&o.heartbeatInterval, "heartbeat-interval", 10*time.Second, "time between heartbeats")
		fs.BoolVar(&o.loop, "loop", false, "play the scenario again and again, going back to its start by allowed transitions")
	}
	var err error
	if o.args, err = parseInterleaved(fs, args[1:]); err != nil {
		return o, err
	}
	if err := o.validate(nodes, scenario); err != nil {
		return o, err
	}
	return o, o.command.check(o.args)
}

// parseInterleaved parses flags wherever they are among the arguments ("silence edge-2
// --namespace x" as well as "silence --namespace x edge-2"); after "--" all are arguments,
// which is how a negative number is passed.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

func (o *options) validate(nodes, scenario string) error {
	if msgs := validation.IsDNS1123Label(o.namespace); len(msgs) > 0 {
		return fmt.Errorf("--namespace %q: %s", o.namespace, strings.Join(msgs, "; "))
	}
	for flagName, value := range map[string]string{"--configmap": o.configMapN, "--daemonset": o.daemonSetN} {
		if msgs := validation.IsDNS1123Subdomain(value); len(msgs) > 0 {
			return fmt.Errorf("%s %q: %s", flagName, value, strings.Join(msgs, "; "))
		}
	}
	if strings.TrimSpace(o.component) == "" {
		return errors.New("--component is empty")
	}
	var err error
	if o.nodes, err = parseNodes(nodes); err != nil {
		return fmt.Errorf("--nodes %q: %w", nodes, err)
	}
	if o.command.name != "run" {
		return nil
	}
	if o.stepInterval < 0 {
		return fmt.Errorf("--step-interval %s: must not be negative", o.stepInterval)
	}
	if o.heartbeatInterval <= 0 {
		return fmt.Errorf("--heartbeat-interval %s: must be positive", o.heartbeatInterval)
	}
	names := make([]string, len(o.nodes))
	for i, n := range o.nodes {
		names[i] = n.Name
	}
	if o.scenario, err = legacysim.BuiltIn(scenario, names); err != nil {
		return fmt.Errorf("--scenario: %w", err)
	}
	return nil
}

// parseNodes reads NAME[:ROLE],...: the first node is the primary unless it says otherwise,
// the others secondaries. Every node's bond mode is active-backup.
func parseNodes(value string) ([]legacysim.NodeSpec, error) {
	var out []legacysim.NodeSpec
	for i, item := range strings.Split(value, ",") {
		name, role, hasRole := strings.Cut(strings.TrimSpace(item), ":")
		spec := legacysim.NodeSpec{Name: name, Role: nwv1.NodeRoleSecondary, BondMode: nwv1.BondModeActiveBackup}
		if i == 0 {
			spec.Role = nwv1.NodeRolePrimary
		}
		if hasRole {
			spec.Role = nwv1.NodeRole(role)
		}
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			return nil, fmt.Errorf("node name %q: %s", name, strings.Join(msgs, "; "))
		}
		switch spec.Role {
		case nwv1.NodeRolePrimary, nwv1.NodeRoleSecondary, nwv1.NodeRoleTiebreaker:
		default:
			return nil, fmt.Errorf("node %s: role %q is not primary, secondary or tiebreaker", name, role)
		}
		if slices.ContainsFunc(out, func(n legacysim.NodeSpec) bool { return n.Name == name }) {
			return nil, fmt.Errorf("node %s is listed twice", name)
		}
		out = append(out, spec)
	}
	return out, nil
}
