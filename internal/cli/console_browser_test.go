package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/relaystation/relay/internal/testenv"
)

// The console's browser tests drive the real relay (`relay serve`, the
// console inside it, no Slack settings so approvals wait for the console)
// in Debian's headless Chromium through the DevTools protocol (chromedp).
// One browser serves the whole test binary; each test opens its own tab.

// chromiumPath is Debian's chromium (scripts/setup.sh installs it).
const chromiumPath = "/usr/bin/chromium"

var browser struct {
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if browser.cancel != nil {
		browser.cancel()
	}
	os.Exit(code)
}

// newTab opens a tab of the test binary's browser, closed when t ends.
func newTab(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Missing(t, "Chromium at %s (apt-get install chromium, or scripts/setup.sh)", chromiumPath)
	}
	browser.once.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromiumPath), chromedp.NoSandbox,
			chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(alloc)
		browser.ctx, browser.cancel = ctx, func() { cancel(); cancelAlloc() }
		browser.err = chromedp.Do(ctx) // starts the browser
	})
	if browser.err != nil {
		t.Fatalf("start %s: %v", chromiumPath, browser.err)
	}
	tab, cancel := chromedp.NewContext(browser.ctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return tab
}

// do runs steps in the tab within d, failing t with what.
func do(t *testing.T, tab context.Context, d time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, d)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		failed(t, tab)
		t.Fatalf("%s: %v", what, err)
	}
}

// submit clicks (or double-clicks) the form button sel and waits until the
// page the form's redirect leads to has loaded.
func submit(t *testing.T, tab context.Context, sel string, double bool) {
	t.Helper()
	do(t, tab, 20*time.Second, "mark the page", chromedp.Query(sel, chromedp.NodeVisible), chromedp.Evaluate[chromedp.Void](`window.relayOldPage = true`))
	click := chromedp.Click(sel, chromedp.NodeVisible)
	if double {
		click = chromedp.DoubleClick(sel, chromedp.NodeVisible)
	}
	// A live update may replace the button between finding and clicking
	// it: click again while the page is still the old one.
	testenv.Poll(t, 20*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(tab, 5*time.Second)
		defer cancel()
		err := chromedp.Do(ctx, click)
		if err == nil {
			return true, ""
		}
		old, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.relayOldPage === true`))
		return !old, fmt.Sprintf("click %s: %v", sel, err)
	})
	testenv.Poll(t, 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(tab, 2*time.Second)
		defer cancel()
		done, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!window.relayOldPage && document.readyState === "complete"`))
		return err == nil && done, fmt.Sprintf("the page after clicking %s did not load (%v)", sel, err)
	})
}

// waitText waits until the element sel selects shows want.
func waitText(t *testing.T, tab context.Context, sel, want string) {
	t.Helper()
	js := fmt.Sprintf(`(document.querySelector(%q)||{}).textContent||""`, sel)
	var got string
	testenv.Poll(t, 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(tab, 2*time.Second)
		defer cancel()
		// A page being replaced (a form's redirect) fails the evaluation: poll on.
		if s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js)); err == nil {
			got = s
		}
		if !strings.Contains(got, want) {
			return false, fmt.Sprintf("%s never showed %q (shows %q)", sel, want, got)
		}
		return true, ""
	})
}

// failed saves a screenshot of a failed step when RELAY_SCREENSHOTS is set.
func failed(t *testing.T, tab context.Context) {
	if os.Getenv("RELAY_SCREENSHOTS") != "" {
		screenshot(t, tab, "failed-"+strings.ReplaceAll(t.Name(), "/", "-"))
	}
}

// screenshot saves the page as name.png under the test's temp dir and,
// when RELAY_SCREENSHOTS names a directory, there too.
func screenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := []string{t.TempDir()}
	if d := os.Getenv("RELAY_SCREENSHOTS"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, name+".png"), png, 0o644))
	}
}

// consoleStack runs the relay without Slack settings: suggestions wait in
// the console.
func consoleStack(t *testing.T) (*stack, string) {
	t.Helper()
	s := startStack(t, func(env map[string]string) {
		for _, k := range []string{"SLACK_BOT_TOKEN", "SLACK_APPROVAL_CHANNEL", "SLACK_APPROVERS"} {
			delete(env, k)
		}
	})
	return s, "http://" + s.env["RELAY_CONSOLE_ADDR"]
}

func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "the console in a browser")
	tab := newTab(t)
	s, base := consoleStack(t)

	// Events: a webhook appears while the page is open, without a reload.
	do(t, tab, 20*time.Second, "open Events", chromedp.Navigate(base+"/events"), chromedp.Query("#livestate", chromedp.NodeVisible))
	waitText(t, tab, "#livestate", "live")
	repo := s.issueOpened(101, "console")
	thread := "github:" + strings.SplitN(repo, "#", 2)[0] + "#101"
	do(t, tab, 30*time.Second, "the webhook in Events", chromedp.Query(`tr[data-subject="in.github.issues"]`, chromedp.NodeVisible))
	screenshot(t, tab, "events")

	// Approvals: a double click on Approve posts exactly one comment.
	do(t, tab, 20*time.Second, "open Approvals", chromedp.Navigate(base+"/approvals"))
	do(t, tab, 60*time.Second, "the suggestion in Approvals", chromedp.Query("article.approval button.approve", chromedp.NodeVisible))
	screenshot(t, tab, "approvals")
	submit(t, tab, "article.approval button.approve", true)
	c := s.exactlyOneComment(101)
	if !strings.Contains(c.Body, "checked the logs") {
		t.Errorf("comment %q, want the model's answer", c.Body)
	}
	waitText(t, tab, "#h-decided + table", "console:"+"local")

	// Story: every hop of the webhook, on one timeline.
	do(t, tab, 20*time.Second, "open the story", chromedp.Navigate(base+"/story?id="+urlQueryEscapeTest(thread)))
	for _, kind := range []string{"webhook", "model_call", "tool_call", "tool_result", "suggestion", "approval", "outbound"} {
		do(t, tab, 30*time.Second, "the "+kind+" hop", chromedp.Query(".hop-"+kind, chromedp.NodeVisible))
	}
	screenshot(t, tab, "story")

	t.Run("dead letter replayed", func(t *testing.T) { consoleReplay(t, s.with(t), tab, base) })
	t.Run("server disabled and enabled", func(t *testing.T) { consoleSwitch(t, tab, base) })
	do(t, tab, 20*time.Second, "open Overview", chromedp.Navigate(base+"/"), chromedp.Query("#fig-pending", chromedp.NodeVisible))
	// The webhooks chart, drawn by the server as SVG: the minutes of this
	// test's webhooks (GitHub's) have bars of that provider the browser lays
	// out with a height, and the legend names every provider.
	testenv.Poll(t, 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(tab, 2*time.Second)
		defer cancel()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll("#chart-webhooks svg rect.bar[data-series=github]")].filter(r => r.getBBox().height > 0).length + (document.querySelectorAll("#chart-webhooks svg g.legend").length == 4 ? 0 : -1000)`))
		return err == nil && n > 0, fmt.Sprintf("no github bar with a height or not 4 providers in the legend of the webhooks chart (%d, %v)", n, err)
	})
	// The approvals chart: this test decided its approvals, so it renders
	// its empty state with the age ranges.
	do(t, tab, 10*time.Second, "the approvals chart", chromedp.Query(`#chart-approvals svg text.empty`, chromedp.NodeVisible))
	// The latency chart: this test's webhooks were suggested, approved in
	// the console and commented on, so each stage has a point (its p50 in
	// data-p50, µs) the browser lays out inside the chart, and the legend
	// gives each stage's hour.
	testenv.Poll(t, 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(tab, 2*time.Second)
		defer cancel()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`["webhook → suggestion", "suggestion → decision", "decision → comment"].map(st =>
			[...document.querySelectorAll('#chart-latency svg circle[data-stage="' + st + '"]')].filter(c => c.getBBox().width > 0 && +c.dataset.p50 >= 0 && +c.dataset.p99 >= +c.dataset.p50).length + " " + st)`))
		want := []string{"webhook → suggestion", "suggestion → decision", "decision → comment"}
		for i, w := range want {
			if err != nil || len(got) != len(want) || strings.HasPrefix(got[i], "0 ") {
				return false, fmt.Sprintf("the latency chart lacks a point of %s (points per stage %q, %v)", w, got, err)
			}
		}
		return true, ""
	})
	waitText(t, tab, "#chart-latency svg", "decision → comment: p50")
	// The tool chart: the agent's calls to the everything server are bars
	// of that server; the failures chart renders too.
	testenv.Poll(t, 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(tab, 2*time.Second)
		defer cancel()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll("#chart-tool-calls svg rect.bar[data-series=everything]")].filter(r => r.getBBox().height > 0).length + (document.querySelector("#chart-tool-errors svg") ? 0 : -1000)`))
		return err == nil && n > 0, fmt.Sprintf("no bar of the everything server with a height in the tool calls chart, or no failures chart (%d, %v)", n, err)
	})
	screenshot(t, tab, "overview")
}

// consoleReplay: an approved answer GitHub refuses (404) is dead-lettered
// by outbound; Replay in the console posts it.
func consoleReplay(t *testing.T, s *stack, tab context.Context, base string) {
	s.issueOpened(102, "console")
	do(t, tab, 20*time.Second, "open Approvals", chromedp.Navigate(base+"/approvals"))
	do(t, tab, 60*time.Second, "the second suggestion", chromedp.Query("article.approval button.approve", chromedp.NodeVisible))
	s.gh.FailNext(404)
	submit(t, tab, "article.approval button.approve", false)
	do(t, tab, 20*time.Second, "open Dead letters", chromedp.Navigate(base+"/dlq"))
	do(t, tab, 60*time.Second, "the dead letter", chromedp.Query("table.dlq tbody tr[id^='dl-']", chromedp.NodeVisible))
	screenshot(t, tab, "dead-letters")
	if n := len(s.comments(102)); n != 0 {
		t.Fatalf("got %d comments on #102 before the replay, want 0", n)
	}
	submit(t, tab, "table.dlq tbody tr[id^='dl-'] form[action$='/replay'] button", false)
	s.exactlyOneComment(102)
	waitText(t, tab, "#live", "No dead letter.")
}

// consoleSwitch disables the everything server in the Tools page and
// enables it again.
func consoleSwitch(t *testing.T, tab context.Context, base string) {
	do(t, tab, 20*time.Second, "open Tools", chromedp.Navigate(base+"/tools"))
	waitText(t, tab, "#server-everything", "ready")
	submit(t, tab, "#server-everything button", false)
	waitText(t, tab, "#server-everything .state", "disabled")
	screenshot(t, tab, "tools")
	submit(t, tab, "#server-everything button", false)
	waitText(t, tab, "#server-everything button", "Disable")
	waitText(t, tab, "#server-everything .state", "ready")
}

func urlQueryEscapeTest(s string) string {
	return strings.NewReplacer("#", "%23", ":", "%3A", "/", "%2F").Replace(s)
}
