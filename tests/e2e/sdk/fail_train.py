# A script that fails: the job ends Failed with its exception's last line, and the SDK's fit() raises.
print("loading the data", flush=True)
raise ValueError("the label column is missing")
