package console

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/services/toolrunner"
	"github.com/relaystation/relay/tools"
)

// The tool chart counts the tool runner's audit records (as it publishes
// them) per server, the failures apart; a restarted console reads the same
// back, and a refresh adds what came since.
func TestToolMinutesFromStream(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	audit := func(server string, statuses ...tools.Status) {
		t.Helper()
		for _, st := range statuses {
			r := tools.Record{ID: uuid.NewString(), Time: time.Now(), Server: server, Tool: "echo", Status: st}
			if _, err := b.Publish(t.Context(), toolrunner.SubjectAudit, toolrunner.AuditEnvelope(r)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// totals sums each server's calls and failures over the last two
	// minutes (a minute may end between publishing and counting), and
	// checks the minutes before are empty.
	totals := func(tm *toolMinutes) string {
		t.Helper()
		calls, failed, first, err := tm.counts(t.Context(), b, time.Now(), chartMinutes)
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(first) < chartMinutes*time.Minute || len(calls) != len(failed) {
			t.Fatalf("%d and %d series from %v", len(calls), len(failed), first)
		}
		out := ""
		for i := range calls {
			if calls[i].Name != failed[i].Name || len(calls[i].Counts) != chartMinutes+1 {
				t.Fatalf("series %d: %s with %d counts and %s", i, calls[i].Name, len(calls[i].Counts), failed[i].Name)
			}
			c, f := calls[i].Counts, failed[i].Counts
			for m := range chartMinutes - 1 {
				if c[m] != 0 || f[m] != 0 {
					t.Errorf("%s minute %d: %d calls, %d failed, want none", calls[i].Name, m, c[m], f[m])
				}
			}
			out += fmt.Sprintf("%s %d/%d ", calls[i].Name, c[chartMinutes-1]+c[chartMinutes], f[chartMinutes-1]+f[chartMinutes])
		}
		return out
	}
	var tm toolMinutes
	if got := totals(&tm); got != "" {
		t.Fatalf("no audit records: %q", got)
	}
	audit("everything", tools.StatusSuccess, tools.StatusError, tools.StatusSuccess, tools.StatusSuccess)
	audit("github", tools.StatusTimeout, tools.StatusSuccess, tools.StatusPermissionDenied)
	// Other audit records on the work stream are not tool calls.
	if _, err := b.Publish(t.Context(), "audit.approvals", toolrunner.AuditEnvelope(tools.Record{ID: uuid.NewString(), Server: "approvals", Status: tools.StatusSuccess})); err != nil {
		t.Fatal(err)
	}
	want := "everything 4/1 github 3/2 "
	if got := totals(&tm); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := totals(&tm); got != want {
		t.Errorf("a second refresh: got %q, want %q (each record counted once)", got, want)
	}
	if got := totals(&toolMinutes{}); got != want {
		t.Errorf("a restarted console: got %q, want %q (read back from the stream)", got, want)
	}
	audit("everything", tools.StatusCancelled, tools.StatusSuccess)
	if got, want := totals(&tm), "everything 6/2 github 3/2 "; got != want {
		t.Errorf("after two more: got %q, want %q", got, want)
	}
	noConsumersLeft(t, b, subjectToolAudit)
}

// A tool server's colour comes again after the stylesheet's eight.
func TestStackedChartManySeries(t *testing.T) {
	t.Parallel()
	var ss []series
	for i := range seriesColours + 1 {
		c := make([]int, chartMinutes+1)
		c[chartMinutes] = 1
		ss = append(ss, series{Name: fmt.Sprint("server", i), Counts: c})
	}
	svg := string(stackedChart("Tool calls per minute", "no tool call in the last hour", ss, time.Now()))
	for _, want := range []string{`class="bar s0" data-series="server0"`, `class="bar s0" data-series="server8"`, `class="bar s7" data-series="server7"`, "Tool calls per minute: 9 in the last hour"} {
		if !strings.Contains(svg, want) {
			t.Errorf("svg lacks %q", want)
		}
	}
	if empty := string(stackedChart("Tool calls per minute", "no tool call in the last hour", nil, time.Now())); !strings.Contains(empty, "no tool call in the last hour") {
		t.Errorf("empty chart: %s", empty)
	}
}
