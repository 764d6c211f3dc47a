module torchgate.invalid/node/pause

go 1.26
