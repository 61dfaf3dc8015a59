// placeholder until the first real source of halogen::pipeline lands; removed then
