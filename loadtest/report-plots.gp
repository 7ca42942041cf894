# The plots of the strategy comparison report (loadtest/report). Run by the report as
#   gnuplot -e "fmt='png'; datadir='DIR'; outdir='DIR'; stock_modes='none zk'; \
#       subtitle='LOAD'; thinks='0 1000'; stock_think='1000'" report-plots.gp
# and reads the data it wrote from report.json:
#   DIR/modes.tsv       label, throughput (req/s) at each think time in `thinks`, then
#                       p50 ms and p99 ms at the first; one line per run spec
#   DIR/stock-M.tsv     seconds since the load started, stock; one line per sample
# With what='scale' (the scale-out sweep, scale.json) it reads instead
#   DIR/scale-KIND-I.tsv  instances, req/s, mean batch; one file per load KIND (hot,
#                         spread) and series I, the I-th word of scale_series
#                         ("MODE/ROUTE ...")
# and writes scale-hot.FMT, scale-spread.FMT and scale-batch.FMT.
# Otherwise it writes throughput.FMT, p99.FMT and stock.FMT to outdir, FMT being png (the files
# next to report.md) or svg (the charts that index.html carries inline). pngcairo draws
# smoother text and lines, but gnuplot-nox builds may lack it, so plain png is the
# fallback. The svg terminal is built into every gnuplot; its text uses a generic font
# family, so the page needs no font from anywhere.

if (!exists("fmt")) fmt = "png"
if (fmt eq "svg") {
    set terminal svg size 900,520 noenhanced font "sans-serif,13" background rgb "white"
} else {
    if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
        set terminal pngcairo size 900,520 noenhanced font "Sans,10"
    } else {
        set terminal png size 900,520 noenhanced
    }
}
set datafile separator "\t"

# ---------------------------------------------------------------- the scale-out curve

if (exists("what") && what eq "scale") {
    set style data linespoints
    set grid xtics ytics
    set key outside right top
    set xtics 1
    set xrange [0.5:*]
    set yrange [0:*]
    set xlabel "stockd instances behind nginx"
    nseries = words(scale_series)
    do for [k in "hot spread"] {
        set output outdir."/scale-".k.".".fmt
        set title "req/s against instances: ".(k eq "hot" ? "one hot product (ab)" : "spread products (wrk)")
        set ylabel "requests per second (median of the runs)"
        plot for [i = 1:nseries] datadir."/scale-".k."-".i.".tsv" using 1:2 \
                 linewidth 2 pointtype 7 linecolor i title word(scale_series, i)
    }
    set output outdir."/scale-batch.".fmt
    set title "Mean batch on one hot product: deductions per lock acquisition (per transaction for for-update)"
    set ylabel "deductions per batch"
    plot for [i = 1:nseries] datadir."/scale-hot-".i.".tsv" using 1:3 \
             linewidth 2 pointtype 7 linecolor i title word(scale_series, i)
    exit
}

modes = datadir."/modes.tsv"

# ---------------------------------------------------------------- bar charts

set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.8
set grid ytics
set yrange [0:*]
set xtics nomirror
set key top left

nthink = words(thinks)
p50col = nthink + 2
p99col = nthink + 3
set xtics rotate by -30

set output outdir."/throughput.".fmt
set title "Throughput by strategy (all requests, deducted and sold out)\n".subtitle
set ylabel "requests per second"
set offsets 0, 0, graph 0.08, 0
plot for [i = 1:nthink] modes using (column(i + 1)):xtic(1) \
         title "think ".word(thinks, i)." us" linecolor i

set output outdir."/p99.".fmt
set title "Latency by strategy at think ".word(thinks, 1)." us (every answered request)\n".subtitle
set ylabel "milliseconds"
plot modes using p50col:xtic(1) title "p50" linecolor rgb "#88ccee", \
     "" using p99col title "p99" linecolor rgb "#cc6677"

# ---------------------------------------------------------------- stock over time

if (strlen(stock_modes) > 0) {
    set style data steps
    set offsets 0, 0, 0, 0
    set yrange [*:*]
    set grid xtics ytics
    set key top right
    set output outdir."/stock.".fmt
    set xtics norotate
    set title "Stock of the hot product while the load runs (think ".stock_think." us)\n".subtitle
    set xlabel "seconds since the load started"
    set ylabel "stock"
    set xzeroaxis linetype 1 linecolor rgb "#888888" linewidth 1.5
    # Steps, since the stock is known only at the samples; the points mark them.
    plot for [i = 1:words(stock_modes)] datadir."/stock-".word(stock_modes, i).".tsv" \
             using 1:2 with steps linewidth 2 linecolor i title word(stock_modes, i), \
         for [i = 1:words(stock_modes)] datadir."/stock-".word(stock_modes, i).".tsv" \
             using 1:2 with points pointtype 7 pointsize 0.6 linecolor i notitle
}
