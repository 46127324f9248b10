"""Seeds 50 users into kv (run as agent `seeder`)."""

import sandgate_tools as tools

CITIES = ["Lisbon", "Oslo", "Nairobi", "Lima", "Osaka"]
PLANS = ["free", "pro", "team"]

for n in range(1, 51):
    user = {
        "id": n,
        "name": f"user{n:02d}",
        "city": CITIES[n % len(CITIES)],
        "plan": PLANS[(n * 7) % len(PLANS)],
        "monthly_spend": round((n * 37) % 120 + n / 10, 2),
    }
    tools.kv.set(key=f"user:{n}", value=user)
print("seeded 50 users")
