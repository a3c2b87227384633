package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toolrt/agent/protocol"
)

func TestUsersResolveAsThePythonAgentDoes(t *testing.T) {
	passwd := filepath.Join(t.TempDir(), "passwd")
	table := "root:x:0:0:root:/root:/bin/bash\n# a comment\n\nbroken line\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n" +
		"sandbox:x:1000:1000::/workspace:/bin/bash\nalias:x:1000:7::/:/bin/sh\n"
	if err := os.WriteFile(passwd, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	saved := passwdPath
	passwdPath = passwd
	defer func() { passwdPath = saved }()

	for _, c := range []struct {
		user         string
		capabilities bool
		want         who
		launcher     string
	}{
		{"", true, sandboxUser, "1000"},
		{"root", false, who{0, 0, 0}, "0:0"},
		{"root", true, who{0, 0, rootCapabilities}, "0:db"},
		{"00", true, who{0, 0, rootCapabilities}, "0:db"},
		{"nobody", true, who{65534, 65534, 0}, "65534"},
		{"1000", false, who{1000, 1000, 0}, "1000"}, // the first entry of a uid
		{"alias", false, who{1000, 7, 0}, "1000"},
		{"4242", false, who{4242, 4242, 0}, "4242"}, // a bare uid passwd lacks
		{"2147483647", false, who{lastUID, lastUID, 0}, "2147483647"},
	} {
		got, err := resolveUser(c.user, c.capabilities)
		if err != nil || got != c.want || got.launcherUID() != c.launcher {
			t.Errorf("resolveUser(%q, %v) = %+v (%s), %v; want %+v (%s)",
				c.user, c.capabilities, got, got.launcherUID(), err, c.want, c.launcher)
		}
	}
	for _, user := range []string{"daemon", "2147483648", "99999999999999999999999", "-1", "1e3",
		"x:y", strings.Repeat("é", 100)} {
		_, err := resolveUser(user, false)
		failure := failureOf(err)
		if err == nil || failure.Code != protocol.UserNotAllowed ||
			!strings.HasSuffix(failure.Message, ": no such user in the sandbox's /etc/passwd") {
			t.Errorf("resolveUser(%q) = %v; want USER_NOT_ALLOWED", user, err)
		}
	}
	_, err := resolveUser(strings.Repeat("é", 100), false)
	if want := "user '" + strings.Repeat("é", 64) + "': "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("a long name is cut to 64 characters: %v", err)
	}
}
