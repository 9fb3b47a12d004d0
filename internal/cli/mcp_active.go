package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/services/toolrunner"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// activeExecution is one line of `relay mcp active -json`.
type activeExecution struct {
	tools.Execution
	ElapsedMS int64 `json:"elapsed_ms"`
}

// mcpActive lists the executions running in every tool runner on the bus:
// from a running runner, else from the shared state directly.
func mcpActive(ctx context.Context, a *app, args []string) error {
	fs := a.flags("mcp active")
	asJSON := fs.Bool("json", false, "print JSON")
	b, err := a.parseDial(ctx, fs, args)
	if err != nil {
		return err
	}
	defer b.Close()
	es, err := tools.ActiveRemote(ctx, b.Conn(), b.Prefix())
	if errors.Is(err, tools.ErrNoRunner) {
		es, err = activeFromState(ctx, b)
	}
	if err != nil {
		return &exitError{code: 1, msg: fmt.Sprintf("mcp active: %v", err)}
	}
	now := time.Now()
	if *asJSON {
		out := make([]activeExecution, len(es))
		for i, e := range es {
			out[i] = activeExecution{Execution: e, ElapsedMS: now.Sub(e.Started).Milliseconds()}
		}
		return json.NewEncoder(a.stdout).Encode(map[string]any{"executions": out})
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSERVER\tTOOL\tTHREAD\tACTOR\tSTARTED\tELAPSED")
	for _, e := range es {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Server, e.Tool, orDash(clip.Line(e.Thread, 60)), orDash(e.Actor),
			e.Started.Local().Format(time.DateTime), now.Sub(e.Started).Round(100*time.Millisecond))
	}
	_ = tw.Flush()
	fmt.Fprintf(a.stdout, "%d active execution(s)\n", len(es))
	return nil
}

// activeFromState reads the active executions from the shared state when no
// tool runner answers (executions of `relay mcp call` are there too).
func activeFromState(ctx context.Context, b *bus.Bus) ([]tools.Execution, error) {
	lim, err := toolrunner.OpenLimits(ctx, b, 0, nil)
	if err != nil {
		return nil, err
	}
	return lim.Active(ctx)
}

// mcpCancel asks the tool runners to cancel one execution.
func mcpCancel(ctx context.Context, a *app, args []string) error {
	const usage = "usage: relay mcp cancel <execution id> [--actor WHO]"
	if len(args) == 0 {
		return &exitError{code: 2, msg: usage}
	}
	id := args[0]
	fs := a.flags("mcp cancel")
	actor := fs.String("actor", cliActor(), "who cancels, as the audit record's cancelled_by names it")
	b, err := a.parseDial(ctx, fs, args[1:])
	if err != nil {
		return err
	}
	defer b.Close()
	err = tools.CancelRemote(ctx, b.Conn(), b.Prefix(), id, *actor)
	if errors.Is(err, tools.ErrNoRunner) {
		// No tool runner to ask, but the execution may be a CLI process's,
		// which no runner could cancel anyway: say so.
		if es, serr := activeFromState(ctx, b); serr == nil {
			for _, e := range es {
				if e.ID == id && e.Process != "" {
					err = errors.New(e.ProcessCancel())
					break
				}
			}
		}
	}
	if err != nil {
		return &exitError{code: 1, msg: fmt.Sprintf("mcp cancel %s: %v", id, err)}
	}
	fmt.Fprintf(a.stdout, "cancelled %s (its audit record names %s)\n", id, *actor)
	return nil
}

// cliProcess names this process as `relay mcp <cmd>` in the executions it
// registers (tools.Execution.Process): it takes no cancels over NATS, and a
// `relay mcp cancel` of them says where they run.
func cliProcess(cmd string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("relay mcp %s (pid %d on %s)", cmd, os.Getpid(), cmp.Or(host, "an unknown host"))
}

// cliActor names the person running the CLI: "cli:<login>".
func cliActor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = cmp.Or(u.Username, u.Uid)
	}
	return "cli:" + name
}

// sharedTools is the tool runners' shared state as `relay mcp call` and
// `relay mcp test` use it: the stop switch and the shared limits.
type sharedTools struct {
	bus    *bus.Bus
	state  *toolrunner.KVState
	limits *toolrunner.KVLimits
}

// openShared connects to NATS to read the stop switch and count in the
// shared limits. Without a reachable server it says on stderr what was not
// checked and returns nil: operator commands never hang on a bus.
func (a *app) openShared(ctx context.Context, cmd string) (*sharedTools, func()) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	b, err := a.clientBus(cctx)
	var sh *sharedTools
	if err == nil {
		sh = &sharedTools{bus: b}
		if sh.state, err = toolrunner.OpenState(cctx, b); err == nil {
			sh.limits, err = toolrunner.OpenLimits(cctx, b, 0, a.log)
		}
	}
	if err != nil {
		fmt.Fprintf(a.stderr, "relay mcp %s: running standalone: the stop switch and the shared limits (sessions, daily quotas, concurrency) could not be checked: %v\n", cmd, err)
		if b != nil {
			b.Close()
		}
		return nil, func() {}
	}
	return sh, b.Close
}

// busAudit publishes the audit records of `relay mcp call` on audit.tool,
// as the tool runner publishes its own, so an operator's call is in the
// relay's audit stream too (the file has it either way).
type busAudit struct {
	bus    *bus.Bus
	stderr io.Writer
}

func (a busAudit) Audit(ctx context.Context, r tools.Record) {
	// An interrupted call is audited too: its record outlives ctx.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	if _, err := a.bus.Publish(ctx, toolrunner.SubjectAudit, toolrunner.AuditEnvelope(r), bus.WithMsgID("audit-"+r.ID)); err != nil {
		fmt.Fprintf(a.stderr, "relay mcp call: audit record %s not published on %s (the audit log has it): %v\n", r.ID, a.bus.Subject(toolrunner.SubjectAudit), err)
	}
}

// stopped reports whether the shared stop switch is on.
func (sh *sharedTools) stopped(ctx context.Context) (bool, error) {
	st, err := sh.state.Load(ctx)
	if err != nil {
		return false, fmt.Errorf("read the stop switch: %w", err)
	}
	return st.Stop, nil
}

// admitProbe applies the stop switch and takes a global concurrency slot
// for `relay mcp test <server>` (listed as tool "(probe)") when a NATS
// server is reachable; release gives the slot back.
func (a *app) admitProbe(ctx context.Context, ts *toolrunner.Settings, server string) (release func(), err error) {
	sh, closeShared := a.openShared(ctx, "test")
	if sh == nil {
		return closeShared, nil
	}
	stop, err := sh.stopped(ctx)
	if err != nil || stop {
		closeShared()
		if err != nil {
			return nil, &exitError{code: 1, msg: err.Error()}
		}
		return nil, &exitError{code: 1, msg: "stop switch is ON: no new tool executions, probes included (`relay mcp resume` allows them again)"}
	}
	slots := mcpconfig.DefaultConcurrency
	if ts.Runner.Policy != nil {
		slots = ts.Runner.Policy.Limits.Concurrency
	}
	id := uuid.NewString()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rel, err := sh.limits.Acquire(wctx, tools.Execution{ID: id, Server: server, Tool: "(probe)", Actor: cliActor(), RunID: id, Started: time.Now().UTC(), Owner: "cli", Process: cliProcess("test")}, slots)
	if err != nil {
		closeShared()
		return nil, &exitError{code: 1, msg: fmt.Sprintf("mcp test: no free execution slot (policy limits.concurrency %d): %v", slots, err)}
	}
	return func() { rel(); closeShared() }, nil
}

// stopOnly is the shared state without the servers' entries: `relay mcp
// call` follows the stop switch, while an operator may still call a server
// that is disabled for the runners.
type stopOnly struct{ *toolrunner.KVState }

func (s stopOnly) Load(ctx context.Context) (tools.State, error) {
	st, err := s.KVState.Load(ctx)
	st.Servers = nil
	return st, err
}

func (s stopOnly) Watch(ctx context.Context, fn func(tools.State)) error {
	return s.KVState.Watch(ctx, func(st tools.State) { st.Servers = nil; fn(st) })
}
