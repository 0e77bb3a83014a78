"""Write the rows of SHAPES.csv whose names are not yet in RESULTS.csv (to warm only what is left).

Usage: python tools/remaining_shapes.py SHAPES.csv RESULTS.csv OUT.csv
"""
import csv
import sys

from convwgrad.scoring import measured_shapes

shapes, results, out = sys.argv[1:4]
done = measured_shapes(results)
with open(shapes, newline="") as f:
    rows = list(csv.DictReader(f))
with open(out, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=rows[0].keys())
    writer.writeheader()
    writer.writerows(r for r in rows if r["name"] not in done)
print(f"{sum(r['name'] not in done for r in rows)} of {len(rows)} shapes left -> {out}")
