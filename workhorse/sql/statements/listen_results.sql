SELECT workhorse.listen_results_v2()
