SELECT workhorse.listen_v1()
