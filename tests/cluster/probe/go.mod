module tfrs.local/cluster-probe

go 1.26
