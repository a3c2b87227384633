module toolrt/agent

go 1.19
