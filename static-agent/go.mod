module toolrt/agent

go 1.19

// xz archives: Debian's golang-github-ulikunitz-xz-dev (make go installs it),
// never a download.
require github.com/ulikunitz/xz v0.5.6

replace github.com/ulikunitz/xz => /usr/share/gocode/src/github.com/ulikunitz/xz
