-- bench/scripts/_delivery.sql -- the delivery stream, prepended by run.sh to
-- every contender's script so that all of them see the same deliveries.
--
-- Per client, n counts the fresh messages delivered so far (-D n=0).  A
-- delivery is, with probability dup_pct %, a redelivery of one of the
-- client's last 50 fresh messages (already committed: they were the client's
-- own earlier transactions), otherwise the next fresh message.  Message m of
-- client c gets the key hash(c, m): 64-bit, so keys are spread over a wide
-- range like UUIDs and land at random places in the key index.  Every script
-- draws the same random numbers in the same order, so with one
-- --random-seed client c delivers the same stream in every run.
\set r random(1, 100)
\set back random(0, 49)
\set acct random(1, :naccounts)
\set dup case when :r <= :dup_pct and :n > 0 then 1 else 0 end
\set n :n + 1 - :dup
\set m :n - :dup * least(:back, :n - 1)
\set k abs(hash(:client_id * 1000000000000 + :m, 20241129))
