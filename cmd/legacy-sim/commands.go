package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/legacysim"
)

// command is one subcommand: its positional arguments, how to check them, and what it does.
type command struct {
	name     string
	argNames string
	summary  string
	check    func(args []string) error
	do       func(ctx context.Context, sim *legacysim.Simulator, o options, log *slog.Logger) error
}

var commands = []command{
	{"run", "", "Sets the site up if needed (namespace, DaemonSet, state ConfigMap at INIT), plays the\n" +
		"scenario while heartbeating, then keeps heartbeating until SIGTERM or SIGINT.", arity(), runSite},
	{"silence", "NODE", "Stops NODE's heartbeat, through an annotation a running 'run' honours.", arity("NODE"),
		func(ctx context.Context, sim *legacysim.Simulator, o options, _ *slog.Logger) error {
			return sim.Silence(ctx, o.args[0])
		}},
	{"resume", "NODE", "Lets NODE heartbeat again, with a fresh heartbeat at once.", arity("NODE"),
		func(ctx context.Context, sim *legacysim.Simulator, o options, _ *slog.Logger) error {
			return sim.Resume(ctx, o.args[0])
		}},
	{"set-state", "STATE", "Writes STATE, previousState, stateSince and generation+1 as a transition\n" +
		"would, and emits its Event, even if STATE is unknown or not allowed.", arity("STATE"),
		func(ctx context.Context, sim *legacysim.Simulator, o options, _ *slog.Logger) error {
			return sim.ForceState(ctx, legacy.State(o.args[0]))
		}},
	{"forbidden-jump", "", "Moves to the first state the current one may not go to.", arity(),
		func(ctx context.Context, sim *legacysim.Simulator, _ options, _ *slog.Logger) error {
			_, err := sim.ForbiddenJump(ctx)
			return err
		}},
	{"jump-generation", "N", "Adds N to the generation without a transition; pass a negative N after\n" +
		"'--' (jump-generation -- -3) to make the generation go back.", checkJump,
		func(ctx context.Context, sim *legacysim.Simulator, o options, _ *slog.Logger) error {
			n, _ := strconv.ParseInt(o.args[0], 10, 64) // checked by checkJump
			return sim.JumpGeneration(ctx, n)
		}},
	{"garbage", "KEY VALUE", "Writes VALUE into the ConfigMap key KEY as it is.", arity("KEY", "VALUE"),
		func(ctx context.Context, sim *legacysim.Simulator, o options, _ *slog.Logger) error {
			return sim.WriteGarbage(ctx, o.args[0], o.args[1])
		}},
}

// arity checks that the command got exactly the named arguments.
func arity(names ...string) func(args []string) error {
	return func(args []string) error {
		if len(args) < len(names) {
			return fmt.Errorf("missing argument %s", names[len(args)])
		}
		if len(args) > len(names) {
			return fmt.Errorf("unexpected argument %q", args[len(names)])
		}
		return nil
	}
}

func checkJump(args []string) error {
	if err := arity("N")(args); err != nil {
		return err
	}
	if _, err := strconv.ParseInt(args[0], 10, 64); err != nil {
		return fmt.Errorf("argument N %q is not a decimal integer", args[0])
	}
	return nil
}

// runSite is the run command. SIGTERM or SIGINT (ctx ending) is the normal way out, during
// the scenario or after it.
func runSite(ctx context.Context, sim *legacysim.Simulator, o options, log *slog.Logger) error {
	if err := sim.Setup(ctx); err != nil {
		if ctx.Err() != nil {
			log.Info("Stopping on signal")
			return nil
		}
		return err
	}
	beatCtx, stopBeats := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		sim.RunHeartbeats(beatCtx, o.heartbeatInterval)
		close(done)
	}()
	defer func() { stopBeats(); <-done }()
	for {
		err := sim.Play(ctx, o.scenario, o.stepInterval)
		if ctx.Err() != nil {
			log.Info("Stopping on signal")
			return nil
		}
		if err != nil {
			return err
		}
		if !o.loop {
			break
		}
	}
	log.Info("Scenario done, heartbeating until SIGTERM or SIGINT", "interval", o.heartbeatInterval.String())
	<-ctx.Done()
	log.Info("Stopping on signal")
	return nil
}
