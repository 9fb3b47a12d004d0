package cli

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/services/toolrunner"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

func init() {
	registerCommand(&command{
		name:    "mcp",
		usage:   "list|test|call|login|logout|active|cancel|enable|disable|refresh|stop|resume|install|uninstall|bundles",
		summary: "MCP servers of mcp.json: `list [-json]`, `test <server>`, `call <server> <tool> --args '{...}'`, `login|logout <server>` (OAuth), `active [-json]`, `cancel <id>` (running executions), `enable|disable <server>`, `refresh [server]` (tool lists), `stop|resume` (stop switch), `install|uninstall|bundles` (bundles)",
		run:     runMCP,
	})
}

const mcpUsage = `usage:
  relay mcp list [-json]                              servers, status and tools (from the running relay, else probed)
  relay mcp test <server> [-json]                     Healthy / Degraded / Unhealthy with a timestamp; exit 1 when unhealthy
  relay mcp tools <server> [-json]                    the server's tools with their input/output schemas exactly as sent
  relay mcp call <server> <tool> [--args '{...}'] [--role R] [--save DIR] [-v] [-json]
  relay mcp login <server> [--no-browser]             OAuth login (opens $BROWSER, else prints the URL); tokens stored encrypted
  relay mcp logout <server> [--user U]                revoke (when the server supports it) and delete the stored tokens
  relay mcp active [-json]                            executions running in every tool runner (id, server, tool, thread, actor, started, elapsed)
  relay mcp cancel <id> [--actor WHO]                 cancel a running execution (the server gets notifications/cancelled)
  relay mcp enable <server>                           re-enable (resets the health failure count)
  relay mcp disable <server> [--reason TEXT]
  relay mcp refresh [server]                          running tool runners drop their cached tool list (of one server, or all)
  relay mcp stop | resume                             the stop switch: block / allow every new execution
` + bundlesUsageLines

func runMCP(ctx context.Context, a *app, args []string) error {
	if len(args) > 0 && bundleCommands[args[0]] != nil {
		return bundleCommands[args[0]](ctx, a, args[1:])
	}
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(a.stdout, mcpUsage)
		return nil
	}
	if len(args) == 0 {
		return &exitError{code: 2, msg: mcpUsage}
	}
	sub, rest := args[0], args[1:]
	var ts *toolrunner.Settings
	if sub == "call" || sub == "test" || sub == "tools" || sub == "login" || sub == "logout" {
		// They run the servers of this shell's mcp.json under its policy:
		// invalid files stop them like any invalid setting.
		ts = readToolSettings(a.env)
	}
	if err := a.checkEnv(); err != nil {
		return err
	}
	switch sub {
	case "list":
		return mcpList(ctx, a, rest)
	case "test":
		return mcpTest(ctx, a, ts, rest)
	case "call":
		return mcpCall(ctx, a, ts, rest)
	case "tools":
		return mcpTools(ctx, a, ts, rest)
	case "login":
		return mcpLogin(ctx, a, ts, rest)
	case "logout":
		return mcpLogout(ctx, a, ts, rest)
	case "enable", "disable":
		return mcpEnable(ctx, a, sub == "enable", rest)
	case "refresh":
		return mcpRefresh(ctx, a, rest)
	case "active":
		return mcpActive(ctx, a, rest)
	case "cancel":
		return mcpCancel(ctx, a, rest)
	case "stop", "resume":
		return mcpStop(ctx, a, sub == "stop")
	}
	return &exitError{code: 2, msg: fmt.Sprintf("mcp: unknown subcommand %q\n%s", sub, mcpUsage)}
}

// localTools reads this shell's tool settings (RELAY_MCP_CONFIG,
// RELAY_POLICY, ...) for a subcommand that talks to the running relay and
// uses them on the side only: a stop switch must work while a file is
// mid-edit. Their problems are said on stderr, not returned; ok is false
// then, and ts holds what could be read (no servers when mcp.json is
// invalid).
func (a *app) localTools(cmd string) (ts *toolrunner.Settings, ok bool) {
	scratch := a.env.Scratch()
	ts = readToolSettings(scratch)
	if err := scratch.Err(); err != nil {
		fmt.Fprintf(a.stderr, "relay mcp %s: this shell's tool settings are invalid, used only where they are valid:\n%v\n", cmd, err)
		return ts, false
	}
	return ts, true
}

// findServer finds a server of ts by id or by its name as written in
// mcp.json; an invalid entry is refused with its reason.
func findServer(ts *toolrunner.Settings, name string) (mcpconfig.Server, error) {
	for _, s := range ts.Servers {
		if s.Name == name || s.DisplayName == name {
			return s, nil
		}
	}
	for _, iv := range ts.Invalid {
		if iv.ID == name || iv.Name == name {
			return mcpconfig.Server{}, &exitError{code: 1, msg: fmt.Sprintf("server %q is invalid in mcp.json: %s", iv.Name, iv.Reason())}
		}
	}
	names := make([]string, len(ts.Servers))
	for i, s := range ts.Servers {
		names[i] = s.Name
	}
	return mcpconfig.Server{}, &exitError{code: 2, msg: fmt.Sprintf("no server %q in %s (servers: %s)", name, ts.ConfigPath, strings.Join(names, ", "))}
}

func mcpList(ctx context.Context, a *app, args []string) error {
	fs := a.flags("mcp list")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var statuses []tools.ServerStatus
	var invalid []tools.InvalidEntry
	source, file := "running relay", ""
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	b, err := a.clientBus(cctx)
	cancel()
	if err == nil {
		defer b.Close()
		if st, err := tools.StatusRemote(ctx, b.Conn(), b.Prefix()); err == nil {
			statuses, invalid = st.Servers, st.Invalid
			file = st.ConfigPath // what the running relay read, not this shell's RELAY_MCP_CONFIG
			if st.Stopped {
				fmt.Fprintln(a.stderr, "stop switch is ON: no new tool executions")
			}
			if len(st.Pending) > 0 {
				fmt.Fprintf(a.stderr, "still starting: %s\n", strings.Join(st.Pending, ", "))
			}
		} else {
			fmt.Fprintf(a.stderr, "%v; probing the MCP servers instead\n", err)
		}
	}
	if statuses == nil || file == "" {
		// This shell's files are read only when the running relay did not
		// answer (or named no file).
		ts, _ := a.localTools("list")
		file = cmp.Or(file, ts.ConfigPath)
		if statuses == nil {
			source = "probed now (no running tool runner answered)"
			statuses = probeAll(ctx, ts, persistedStates(ctx, b))
			invalid = toolrunner.InvalidEntries(ts.Invalid)
			for _, n := range ts.Notes {
				fmt.Fprintf(a.stderr, "info: %s\n", n)
			}
		}
	}
	var listErr error
	if len(invalid) > 0 {
		listErr = &exitError{code: 1, msg: fmt.Sprintf("%d invalid server entr%s in %s", len(invalid), map[bool]string{true: "y", false: "ies"}[len(invalid) == 1], file)}
	}
	if *asJSON {
		if jerr := json.NewEncoder(a.stdout).Encode(map[string]any{"source": source, "config": file, "servers": statuses, "invalid": invalid}); jerr != nil {
			return jerr
		}
		return listErr
	}
	printStatuses(a.stdout, statuses, invalid, time.Now())
	fmt.Fprintf(a.stdout, "%d server(s) in %s (%d invalid); status from %s\n", len(statuses)+countSkipped(invalid), file, len(invalid), source)
	for _, iv := range invalid {
		line := fmt.Sprintf("invalid: %s: %s", iv.Name, iv.Reason)
		if iv.Running {
			line += " (its last good version keeps running)"
		}
		fmt.Fprintln(a.stdout, line)
	}
	return listErr
}

// countSkipped counts the invalid entries that have no running version.
func countSkipped(invalid []tools.InvalidEntry) int {
	n := 0
	for _, iv := range invalid {
		if !iv.Running {
			n++
		}
	}
	return n
}

// persistedStates are the servers' states in the tool runners' shared
// state on b (none when b is nil or the state cannot be read).
func persistedStates(ctx context.Context, b *bus.Bus) map[string]tools.ServerState {
	if b != nil {
		if kv, err := toolrunner.OpenState(ctx, b); err == nil {
			if st, err := kv.Load(ctx); err == nil {
				return st.Servers
			}
		}
	}
	return map[string]tools.ServerState{}
}

// printStatuses writes the `relay mcp list` table: a server's id, its name
// as written when it differs, and the invalid entries (state invalid, the
// reason in full below the table).
func printStatuses(w io.Writer, statuses []tools.ServerStatus, invalid []tools.InvalidEntry, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tTYPE\tPROTOCOL\tSTATE\tFAILS\tCONNECTED\tLAST PING\tNEXT RETRY\tAUTO-DISABLED\tCALLS OK/ERR\tLAST CALL\tAVG (100)\tTOOLS\tLISTED\tNOTE")
	for _, s := range statuses {
		note := s.LastError
		if s.State == tools.StateDisabled {
			note = s.DisabledReason
		}
		if i := slices.IndexFunc(invalid, func(iv tools.InvalidEntry) bool { return iv.ID == s.Name }); i >= 0 {
			note = "entry invalid, last good version running; " + note
		}
		name := s.Name
		if s.DisplayName != "" && s.DisplayName != s.Name {
			name += " (" + s.DisplayName + ")"
		}
		s.Name = name
		ping := ago(now, s.LastPing)
		if !s.LastPing.IsZero() {
			ping += " (" + s.PingLatency.Round(time.Microsecond).String() + ")"
		}
		avg := "-"
		if s.AvgLatency > 0 {
			avg = s.AvgLatency.Round(time.Microsecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Type, orDash(s.ProtocolVersion), s.State, s.Failures,
			ago(now, s.LastConnected), ping, in(now, s.NextRetry), ago(now, s.AutoDisabledAt), s.Successes, s.Errors,
			ago(now, s.LastInvocation), avg, toolList(s), ago(now, s.ToolsListed), clip.Line(note, 80))
	}
	for _, iv := range invalid {
		if iv.Running {
			continue
		}
		name := iv.ID
		if iv.Name != iv.ID {
			name += " (" + iv.Name + ")"
		}
		fmt.Fprintf(tw, "%s\t-\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n", name, "invalid", "skipped: see below")
	}
	_ = tw.Flush()
}

// ago and in print a time relative to now, "-" when unset.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String() + " ago"
}

func in(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return "in " + t.Sub(now).Round(100*time.Millisecond).String()
}

func toolList(s tools.ServerStatus) string {
	if len(s.ToolNames) == 0 {
		if s.Tools == 0 {
			return "-"
		}
		return fmt.Sprint(s.Tools)
	}
	return fmt.Sprintf("%d: %s", len(s.ToolNames), clip.Line(strings.Join(s.ToolNames, ","), 60))
}

// versionChoice says how the protocol version of s is chosen.
func versionChoice(s mcpconfig.Server) string {
	if s.ProtocolVersion == "" {
		return "negotiated"
	}
	return "pinned in mcp.json"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// probeAll checks every enabled server with a fresh session, in parallel.
func probeAll(ctx context.Context, ts *toolrunner.Settings, persisted map[string]tools.ServerState) []tools.ServerStatus {
	out := make([]tools.ServerStatus, len(ts.Servers))
	var wg sync.WaitGroup
	for i, s := range ts.Servers {
		st := tools.ServerStatus{Name: s.Name, DisplayName: s.DisplayName, Type: string(s.Type), Description: s.Description,
			Capabilities: s.Capabilities, SchemaVersion: s.SchemaVersion}
		disabled, why := s.Disabled, s.Description
		if p, ok := persisted[s.Name]; ok {
			disabled, why = p.Disabled, p.Reason
		}
		if disabled {
			st.State, st.DisabledReason = tools.StateDisabled, why
			out[i] = st
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := ts.Runner
			cfg.ConnectTimeout = 20 * time.Second
			p := tools.ProbeServer(ctx, cfg, s)
			st.State, st.LastError, st.LastCheck = tools.StateReady, p.Error, p.Timestamp
			switch p.Status {
			case tools.ProbeDegraded:
				st.State = tools.StateDegraded
			case tools.ProbeUnhealthy:
				st.State = tools.StateOffline
			case tools.ProbeNeedsLogin:
				st.State = tools.StateNeedsLogin
			}
			st.ProtocolVersion, st.Handshake, st.ToolNames, st.Tools = p.ProtocolVersion, p.Handshake, p.Tools, len(p.Tools)
			st.ServerName, st.ServerVersion = p.ServerName, p.ServerVersion
			if len(p.Tools) > 0 {
				st.ToolsListed = p.Timestamp // listed during this check
			}
			out[i] = st
		}()
	}
	wg.Wait()
	return out
}

// probeArgs reads the arguments of `relay mcp <verb> <server> [-json]`
// (mcp test, mcp tools): the server, whether -json was given, and the
// admission to talk to it, to release once done.
func probeArgs(ctx context.Context, a *app, ts *toolrunner.Settings, verb string, args []string) (s mcpconfig.Server, asJSON bool, release func(), err error) {
	if len(args) == 0 {
		return s, false, nil, &exitError{code: 2, msg: "usage: relay mcp " + verb + " <server> [-json]"}
	}
	if s, err = findServer(ts, args[0]); err != nil {
		return s, false, nil, err
	}
	fs := a.flags("mcp " + verb)
	jsonFlag := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return s, false, nil, err
	}
	release, err = a.admitProbe(ctx, ts, s.Name)
	return s, *jsonFlag, release, err
}

func mcpTest(ctx context.Context, a *app, ts *toolrunner.Settings, args []string) error {
	s, asJSON, release, err := probeArgs(ctx, a, ts, "test", args)
	if err != nil {
		return err
	}
	p := tools.ProbeServer(ctx, ts.Runner, s)
	release()
	if asJSON {
		if err := json.NewEncoder(a.stdout).Encode(p); err != nil {
			return err
		}
	} else {
		status := p.Status
		if p.Error != "" {
			status += ": " + p.Error
		}
		fmt.Fprintf(a.stdout, "server:       %s (%s)\n", s.Name, s.Type)
		fmt.Fprintf(a.stdout, "status:       %s at %s\n", status, p.Timestamp.Format(time.RFC3339))
		fmt.Fprintf(a.stdout, "handshake:    %s\n", p.Handshake.Round(time.Microsecond))
		fmt.Fprintf(a.stdout, "ping:         %s\n", p.Ping.Round(time.Microsecond))
		fmt.Fprintf(a.stdout, "protocol:     %s (%s)\n", orDash(p.ProtocolVersion), versionChoice(s))
		fmt.Fprintf(a.stdout, "server info:  %s %s\n", orDash(p.ServerName), p.ServerVersion)
		fmt.Fprintf(a.stdout, "capabilities: %s\n", orDash(string(p.Capabilities)))
		fmt.Fprintf(a.stdout, "tools (%d):    %s\n", len(p.Tools), strings.Join(p.Tools, ", "))
	}
	if p.Status == tools.ProbeUnhealthy || p.Status == tools.ProbeNeedsLogin {
		return &exitError{code: 1}
	}
	return nil
}

func mcpCall(ctx context.Context, a *app, ts *toolrunner.Settings, args []string) error {
	if len(args) < 2 {
		return &exitError{code: 2, msg: "usage: relay mcp call <server> <tool> [--args '{...}'] [--role R] [--save DIR] [-v] [-json]"}
	}
	s, err := findServer(ts, args[0])
	if err != nil {
		return err
	}
	tool := args[1]
	fs := a.flags("mcp call")
	rawArgs := fs.String("args", "{}", "tool arguments as a JSON object")
	role := fs.String("role", "", "check the call against this role's capabilities (default: operator, no capability check)")
	asJSON := fs.Bool("json", false, "print the whole result as JSON")
	save := fs.String("save", "", "write image, audio and embedded blob blocks into this directory")
	verbose := fs.Bool("v", false, "show the server's stderr and the runner's debug logs")
	if err := fs.Parse(args[2:]); err != nil {
		return err
	}
	var targs map[string]any
	if err := json.Unmarshal([]byte(*rawArgs), &targs); err != nil {
		return &exitError{code: 2, msg: fmt.Sprintf("--args: not a JSON object: %v", err)}
	}
	sh, closeShared := a.openShared(ctx, "call")
	defer closeShared()
	oauth, closeOAuth := callOAuth(ctx, a, ts, s) // mcp_oauth.go
	defer closeOAuth()
	r, err := callRunner(ctx, a, ts, s, sh, oauth, *verbose)
	if err != nil {
		return err
	}
	defer r.Close()
	res := r.Call(ctx, tools.Request{Tool: s.Name + "." + tool, Args: targs, Caller: tools.Caller{AgentID: "cli", Role: *role}, Operator: *role == "",
		RunID: uuid.NewString(), Actor: cliActor(),
		Progress: func(p tools.ProgressEvent) {
			fmt.Fprintf(a.stderr, "progress %g/%g %s\n", p.Progress, p.Total, p.Message)
		}})
	if *asJSON {
		if err := json.NewEncoder(a.stdout).Encode(res.Map()); err != nil {
			return err
		}
	} else if res.Err == nil {
		if err := printContent(a.stdout, res.Content, tool, *save); err != nil {
			return err
		}
		if res.Structured != nil {
			b, _ := json.MarshalIndent(res.Structured, "", "  ")
			fmt.Fprintln(a.stdout, string(b))
		}
	}
	if errors.Is(res.Err, tools.ErrStopped) {
		return &exitError{code: 1, msg: fmt.Sprintf("%s (status %s; `relay mcp resume` allows executions again)", res.Err, res.Status)}
	}
	if res.Err != nil {
		return &exitError{code: 1, msg: fmt.Sprintf("%s (status %s)", res.Err, res.Status)}
	}
	return nil
}

// callRunner starts a runner on server s alone for `relay mcp call`, on
// the shared stop switch and limits when sh is set, and waits until s is
// ready (not when the stop switch refuses the call anyway).
//
// oauth, when set, gives the runner the stored OAuth grant and the login
// flow (callOAuth); the caller closes it after the call.
func callRunner(ctx context.Context, a *app, ts *toolrunner.Settings, s mcpconfig.Server, sh *sharedTools, oauth *tools.OAuthConfig, verbose bool) (*tools.Runner, error) {
	cfg := ts.Runner
	if sh != nil {
		cfg.State, cfg.Limits = stopOnly{sh.state}, sh.limits
		cfg.Audit = busAudit{bus: sh.bus, stderr: a.stderr}
	}
	s.Disabled = false // an operator may call a disabled server directly
	cfg.Servers = []mcpconfig.Server{s}
	cfg.Logger = a.log
	cfg.StderrLevel = slog.LevelDebug // a server's stderr is noise in a CLI's output
	if verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cfg.Elicitor = terminalElicitor(a)
	cfg.Process = cliProcess("call")
	ready := 30 * time.Second
	if oauth != nil {
		cfg.OAuth = oauth
		cfg.ConnectTimeout = loginTimeout // a login in a browser may be part of the connect
		ready = loginTimeout + 30*time.Second
	}
	r, err := tools.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := r.Start(ctx); err != nil {
		_ = r.Close()
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, ready)
	defer cancel()
	if r.Stopped() { // the call is refused (and audited) without the server
		return r, nil
	}
	if pending := r.WaitReady(wctx); len(pending) > 0 {
		st := r.Servers()[0]
		_ = r.Close()
		return nil, &exitError{code: 1, msg: fmt.Sprintf("server %s is %s: %s", s.Name, st.State, st.LastError)}
	}
	return r, nil
}

func mcpEnable(ctx context.Context, a *app, enable bool, args []string) error {
	verb := map[bool]string{true: "enable", false: "disable"}[enable]
	if len(args) == 0 {
		return &exitError{code: 2, msg: "usage: relay mcp " + verb + " <server>"}
	}
	name := args[0]
	// The name is checked against this shell's mcp.json when it could be
	// read; a broken one does not stand in the way.
	if ts, ok := a.localTools(verb); ok || len(ts.Servers) > 0 {
		if _, err := findServer(ts, name); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stderr, "relay mcp %s: %s not checked against %s\n", verb, name, ts.ConfigPath)
	}
	fs := a.flags("mcp " + verb)
	reason := fs.String("reason", "disabled by an operator", "why (disable)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	st, closeBus, err := a.toolState(ctx)
	if err != nil {
		return err
	}
	defer closeBus()
	ss := tools.ServerState{Disabled: !enable, By: "operator", At: time.Now().UTC()}
	if !enable {
		ss.Reason = *reason
	}
	if err := st.SetServer(ctx, name, ss); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "%sd %s (running tool runners pick it up at once)\n", verb, name)
	return nil
}

// mcpRefresh asks the running tool runners to drop their cached tool lists
// (every runner instance gets the request) and prints the servers refreshed.
func mcpRefresh(ctx context.Context, a *app, args []string) error {
	if len(args) > 1 {
		return &exitError{code: 2, msg: "usage: relay mcp refresh [server]"}
	}
	server := ""
	if len(args) == 1 {
		server = args[0]
	}
	b, err := a.clientBus(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	names, err := tools.RefreshRemote(ctx, b.Conn(), b.Prefix(), server)
	if err != nil {
		return &exitError{code: 1, msg: fmt.Sprintf("mcp refresh: %v", err)}
	}
	if len(names) == 0 {
		fmt.Fprintln(a.stdout, "the running tool runner has no servers")
		return nil
	}
	fmt.Fprintf(a.stdout, "refreshed the tool list of %s (fetched again on next use by every running tool runner)\n", strings.Join(names, ", "))
	return nil
}

// toolState opens the tool runners' shared state (the switches that enable,
// disable and stop) on the client bus; closeBus closes the bus after use.
func (a *app) toolState(ctx context.Context) (st *toolrunner.KVState, closeBus func(), err error) {
	b, err := a.clientBus(ctx)
	if err != nil {
		return nil, nil, err
	}
	st, err = toolrunner.OpenState(ctx, b)
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	return st, func() { b.Close() }, nil
}

func mcpStop(ctx context.Context, a *app, stop bool) error {
	st, closeBus, err := a.toolState(ctx)
	if err != nil {
		return err
	}
	defer closeBus()
	if err := st.SetStop(ctx, stop); err != nil {
		return err
	}
	if stop {
		fmt.Fprintln(a.stdout, "stop switch ON: tool runners refuse new executions (`relay mcp resume` to undo)")
	} else {
		fmt.Fprintln(a.stdout, "stop switch OFF: tool executions allowed")
	}
	return nil
}

// printContent prints every content block of a result: text as it is;
// image and audio as their MIME type and size (written into dir when set);
// resource links and embedded resources as their URI.
func printContent(w io.Writer, content []any, tool, dir string) error {
	for i, c := range content {
		m, _ := c.(map[string]any)
		str := func(k string) string { v, _ := m[k].(string); return v }
		switch kind := str("type"); kind {
		case "text":
			fmt.Fprintln(w, str("text"))
		case "image", "audio":
			line := fmt.Sprintf("[%s %s, %d bytes]", kind, str("mimeType"), base64.StdEncoding.DecodedLen(len(str("data"))))
			if dir != "" {
				path, err := saveBlock(dir, fmt.Sprintf("%s-%d", tool, i+1), str("mimeType"), str("data"))
				if err != nil {
					return err
				}
				line += " saved to " + path
			}
			fmt.Fprintln(w, line)
		case "resource_link":
			fmt.Fprintf(w, "[resource %s]\n", str("uri"))
		case "resource":
			r, _ := m["resource"].(map[string]any)
			uri, _ := r["uri"].(string)
			fmt.Fprintf(w, "[resource %s]\n", uri)
			if text, ok := r["text"].(string); ok && text != "" {
				fmt.Fprintln(w, text)
			}
		default:
			b, _ := json.Marshal(c)
			fmt.Fprintln(w, string(b))
		}
	}
	return nil
}

// saveBlock writes a base64 block into dir as name plus the MIME type's
// extension and returns the path.
func saveBlock(dir, name, mimeType, data string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return "", fmt.Errorf("--save: block %s is not base64: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("--save: %w", err)
	}
	ext := ".bin"
	if exts, _ := mime.ExtensionsByType(mimeType); len(exts) > 0 {
		ext = exts[len(exts)-1]
	}
	path := filepath.Join(dir, name+ext)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", fmt.Errorf("--save: %w", err)
	}
	return path, nil
}
