package main

import "testing"

func TestSlackPlan(t *testing.T) {
	cases := []struct {
		name     string
		started  string
		carried  bool
		current  uint64
		commands string
		raise    bool
	}{
		{"a first start raises it and executes again", "", false, 50_000, keepSlack, true},
		{"after the re-execution commands get the start slack", "50000", true, agentTimerSlackNs, "50000", false},
		{"an agent started with a coarser slack keeps it", "", false, 2 * agentTimerSlackNs, keepSlack, false},
		{"an agent started with exactly its own keeps it", "", false, agentTimerSlackNs, keepSlack, false},
		{"an image's variable on a first start is not believed", "7", true, 50_000, keepSlack, true},
		{"a carried value not below the agent's is not believed", "5000000", true, agentTimerSlackNs, keepSlack, false},
		{"a carried value that is no number is not believed", "x", true, agentTimerSlackNs, keepSlack, false},
		{"a carried zero is not believed", "0", true, agentTimerSlackNs, keepSlack, false},
	}
	for _, c := range cases {
		commands, raise := slackPlan(c.started, c.carried, c.current)
		if commands != c.commands || raise != c.raise {
			t.Errorf("%s: got (%q, %v), want (%q, %v)", c.name, commands, raise, c.commands, c.raise)
		}
	}
}
