package slackscopes

import (
	"slices"
	"testing"
)

func TestBotCoversMethods(t *testing.T) {
	t.Parallel()
	if !Granted() {
		t.Errorf("a method's scope is not in Bot: %v / %v", Methods, Bot)
	}
	if !slices.IsSorted(Bot) {
		t.Errorf("Bot is not sorted: %v", Bot)
	}
}

func TestMissing(t *testing.T) {
	t.Parallel()
	if got := Missing("chat:write, commands"); slices.Contains(got, "chat:write") || !slices.Contains(got, "usergroups:read") {
		t.Errorf("Missing: got %v, want usergroups:read and not chat:write", got)
	}
	if got := Missing(joined()); len(got) != 0 {
		t.Errorf("all granted: got %v missing, want none", got)
	}
}

func joined() string {
	s := ""
	for i, b := range Bot {
		if i > 0 {
			s += ","
		}
		s += b
	}
	return s
}
