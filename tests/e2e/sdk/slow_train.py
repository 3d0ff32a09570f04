# A script that outlives its max_run: the job ends Stopped (MaxRuntimeExceeded).
import time

print("working", flush=True)
while True:
    time.sleep(0.1)
