package schemas_test

import (
	"testing"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// TestPolicyDailyQuotaZero: the orchestrator spec's ToolBudget says a daily
// quota of 0 means unlimited, so a policy writing it loads, without a quota.
func TestPolicyDailyQuotaZero(t *testing.T) {
	t.Parallel()
	p, err := mcpconfig.ParsePolicy([]byte("budgets:\n  github: {rps: 10, daily_quota: 0}\n"))
	if err != nil {
		t.Fatalf("got %v, want daily_quota 0 accepted", err)
	}
	if got := p.Budget("github").DailyQuota; got != 0 {
		t.Errorf("got daily quota %d, want 0 (unlimited)", got)
	}
	if _, err := mcpconfig.ParsePolicy([]byte("budgets:\n  github: {daily_quota: -1}\n")); err == nil {
		t.Error("got daily_quota -1 accepted, want an error")
	}
}
